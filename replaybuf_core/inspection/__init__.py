"""Looking at a store without changing it: ``replaybuf info`` (:mod:`.summary`), ``replaybuf verify``
(:mod:`.verify`: every problem named, nothing trusted) and ``replaybuf view`` (:mod:`.view`: a PNG
contact sheet and plots)."""
