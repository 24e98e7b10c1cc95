"""Training windows: diffusion_policy-style fixed-length sequences with padding and ``_is_pad``
(:mod:`.sampler`, index math in :mod:`.sampler_indices`), per-key windows around an anchor step
(LeRobot's ``delta_timestamps``; :mod:`.window_sampler`) and the O(episodes) window index
(:mod:`.window_index`).  Reads buffers; never writes them."""
