"""How the records show in a notebook (ppt_dask/observe/display.py): the HTML holds every
number of the records it draws, the records stay the lists they were."""

import pickle
import re

from ppt_dask.observe.breakdown import format_table, phase_table
from ppt_dask.observe.display import Curves, LossCurve, PhaseTable, svg_curves

ROWS = [{"round": r, "epoch": r / 4, "wall": 0.1, "gradient": 0.06, "reduce": 0.01, "update": 0.005,
         "evaluate": 0.0, "other": 0.0, "transfer": 0.01, "scheduler": 0.005, "head": 0.005, "idle": 0.005,
         "workers": 2, "transfer_bytes": 100, "streamed": False, "loss": 1.0 / (r + 1), "error_rate": 0.5 / (r + 1)}
        for r in range(6)]


def test_the_phase_table_is_the_list_of_dicts_and_its_html_holds_every_row():
    records = phase_table(ROWS)
    table = PhaseTable(records)
    assert table == records and isinstance(table, list)  # the same records: index, compare, DataFrame
    page = table._repr_html_()
    rows = re.findall(r"<tr>(.*?)</tr>", page.split("<tbody>")[1])
    assert len(rows) == len(records)
    for row, entry in zip(rows, records):  # the oracle: the numbers of the list of dicts, in order
        cells = re.findall(r"<td>(.*?)</td>", row)
        assert cells[:6] == [entry["phase"], f"{entry['percent']:.1f}", f"{entry['cumulative_seconds']:.3f}",
                             f"{entry['seconds']:.3f}", str(entry["rounds"]), f"{entry['ms_per_round']:.3f}"]
    assert repr(table) == format_table(records)  # a short text table, not 60 lines of dicts
    assert pickle.loads(pickle.dumps(table)) == records


def test_an_empty_phase_table_says_so():
    assert "no rounds recorded" in PhaseTable([])._repr_html_()
    assert "no rounds recorded" in repr(PhaseTable([]))


def test_a_loss_curve_is_a_list_of_floats_that_draws_each_point():
    curve = LossCurve([0.9, 0.5, float("nan"), 0.3])
    assert curve == [0.9, 0.5, curve[2], 0.3] and repr(curve).startswith("[0.9, 0.5")
    svg = curve._repr_html_()
    points = re.search(r'points="([^"]*)"', svg).group(1).split()
    assert len(points) == 3  # NaN left out
    assert pickle.loads(pickle.dumps(curve))[0] == 0.9


def test_the_curves_draw_loss_and_error_per_round():
    curves = Curves(ROWS)
    assert curves.loss == [r["loss"] for r in ROWS] and curves.error_rate == [r["error_rate"] for r in ROWS]
    page = curves._repr_html_()
    assert page.count("<svg") == 2 and all(len(p.split()) == len(ROWS) for p in re.findall(r'points="([^"]*)"', page))
    assert repr(curves) == "Curves(6 rounds, last loss 0.1667)"


def test_nothing_to_draw_is_said_in_words():
    assert "nothing recorded" in svg_curves({"loss": [None, float("inf")]}, "round")
