"""A trained model: its parameter layout (:mod:`.layout`) and its files (:mod:`.files`)."""
