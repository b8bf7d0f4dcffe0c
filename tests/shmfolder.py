"""The worker plugin of ``conftest.own_shm``: a worker's shared-memory segments in a folder of
their own. A module apart, imported when a test asks for it: conftest itself imports no
distributed (its logging set-up at conftest's import would change what tests capture)."""

from distributed.diagnostics.plugin import WorkerPlugin


class ShmFolder(WorkerPlugin):
    """On each worker (restarted ones too): ``sharedmem.SHM_DIR`` is ``folder``; back on teardown."""

    name = "ppt-test-shm-folder"

    def __init__(self, folder: str):
        self.folder = folder

    def setup(self, worker) -> None:
        from ppt_dask.engine.wire import sharedmem

        sharedmem.SHM_DIR = self.folder

    def teardown(self, worker) -> None:
        from ppt_dask.engine.wire import sharedmem

        sharedmem.SHM_DIR = "/dev/shm"
