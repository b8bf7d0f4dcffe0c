"""What a run writes to disk: checkpoints to resume from (``checkpoint``) and trained models
(``modelfile``: ``result.save``, ``load_model``; ``modelmeta``: what the file says of its
network)."""
