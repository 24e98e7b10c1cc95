"""Root pytest configuration.

* The HDF5 plugin's tests run only where the plugin is installed (`pip install -e plugins/replaybuf-hdf5`,
  as .ci/run does).
* The long trials carry the ``slow`` marker (registered in pyproject.toml).  Everything runs by
  default (the README's test command); CI runs the slow ones on one leg only and everything else on
  every leg (`-m "not slow"`, see .ci/run).  Slow are: the conformance kit's SIGKILL trials and
  state machines on every harness, the whole kit on the S3 harness (moto's server), and the tests
  named in :data:`SLOW_TESTS` — repeated kill trials, Dask clusters, full-size imports of the real
  datasets, hypothesis models with many examples.  Each of them takes several seconds; see the
  ``--durations`` table CI prints.
"""

import importlib.util

import pytest

collect_ignore = [] if importlib.util.find_spec("replaybuf_hdf5") else ["plugins/replaybuf-hdf5/tests"]

#: conformance-kit tests that are long on any harness (kill trials, hypothesis state machines)
SLOW_KIT_TESTS = {"test_sigkill", "test_state_machine"}
#: the conformance harness whose every test is a round trip to a local S3 server
SLOW_HARNESSES = ("zarr-s3",)
#: file name -> test functions (all their parameters) that are slow
SLOW_TESTS = {
    "test_break_it.py": {"test_a_terminated_import_leaves_nothing_and_a_killed_one_is_cleaned_up_later",
                         "test_thousands_of_chunk_files_under_a_low_descriptor_limit"},
    "test_cluster_copy.py": "*",  # a local Dask cluster
    "test_import_distributed.py": "*",  # a local Dask cluster, worker kills
    "test_import_rlds.py": {"test_on_a_dask_cluster_the_import_is_the_serial_one"},  # a local Dask cluster
    "test_import_resume.py": {"test_a_killed_cli_import_on_local_workers_continues"},  # two CLI runs on local clusters
    "test_crash_safety.py": {"test_sigkill"},
    "test_ctrl_c.py": {"test_ctrl_c_at_many_instants", "test_ctrl_c_of_an_import_on_local_workers"},
    "test_editing.py": {"test_edits_match_a_list_model"},
    "test_hdf5_backend.py": {"test_a_compaction_killed_at_any_instant_leaves_the_file_as_it_was"},
    "test_episode_writer.py": {"test_reading_from_another_thread_while_writing"},
    "test_import_diffusion_policy.py": {"test_pusht_import_counts_codecs_verdict", "test_cli_in_process_and_lossy",
                                        "test_keep_dtype"},
    "test_import_hdf5_formats.py": {"test_the_cli_guesses_each_hdf5_format"},
    "test_import_lerobot_quirks.py": {"test_cli_guesses_the_format_and_names_what_it_cannot_open",
                                      "test_sigterm_mid_import_leaves_nothing",
                                      "test_a_rotation_only_a_later_file_holds_is_said_from_dask_workers_too"},
    "test_import_lerobot_real.py": {"test_gr00t_quirks_are_named_then_imported_with_the_options"},
    "test_import_to_object_storage.py": {"test_a_killed_url_import_leaves_the_committed_episodes",
                                         "test_a_url_import_writes_the_objects_a_local_import_writes"},
    "test_mixture_distributed.py": {"test_every_window_once_in_the_same_order_on_three_or_four_ranks",
                                    "test_a_run_killed_mid_epoch_resumes_from_its_checkpoint_on_any_number_of_ranks"},
    "test_mixture_streaming.py": {"test_workers_of_a_node_share_the_cache_and_fetch_each_shard_once"},  # spawn
    "test_object_storage.py": {"test_dataloader_workers_forked_after_an_s3_open_fail_by_name_instead_of_hanging"},
    "test_peer_harness.py": {"test_lerobot_reads_an_mpeg4_copy_of_two_g1_episodes"},  # LeRobot 0.6.1 in its venv
    "test_read_only_and_locking.py": {"test_one_writer_many_readers"},
    "test_sampler.py": {"test_numba_and_numpy_indices_agree_on_100k_episodes"},
    "test_sharding.py": {"test_sharded_matches_unsharded_and_object_count"},
    "test_stale_writer_fence.py": {"test_twenty_sigstop_trials"},  # 20 SIGSTOP trials on disk and on s3://
    "test_snippets.py": {"test_the_readme_snippets_run_in_order"},  # Push-T, S3 and a Dask cluster
    "test_stats_store.py": {"test_stored_stats_equal_numpy_over_the_model_after_any_operations",
                            "test_wide_steps_infinities_and_huge_values_match_numpy"},
}


def _is_slow(item) -> bool:
    name = getattr(item, "originalname", None) or item.name.split("[")[0]
    chosen = SLOW_TESTS.get(item.path.name)
    if chosen == "*" or (chosen and name in chosen):
        return True
    if item.cls is not None and any(c.__module__.startswith("replaybuf_core.testing") for c in item.cls.__mro__):
        params = getattr(getattr(item, "callspec", None), "params", {})
        if name in SLOW_KIT_TESTS or any(str(v) in SLOW_HARNESSES for v in params.values()) \
                or any(h in item.name for h in SLOW_HARNESSES):
            return True
    return False


def pytest_collection_modifyitems(config, items):
    for item in items:
        if _is_slow(item):
            item.add_marker(pytest.mark.slow)
