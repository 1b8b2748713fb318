# ruff: noqa: E501  (node ids are as long as the tests are named)
"""The tests ``make test`` leaves to ``make test-thorough``, each with the test that keeps its ground.

``make test`` must stay under 12 minutes on a 2-core machine (docs/development.md). A test here is
a long end-to-end run (a second backend's variant, a larger mesh, a second scenario of one rule)
whose behaviour a test that stays in ``make test`` already shows on the real thing; the conftest
marks each ``thorough`` by its node id (a prefix: every parameter of a test when it names none).
``make test-thorough`` and ``make test-all`` run them. A name here that matches no test fails the
collection (``tests/test_support.py``), so the list cannot rot.
"""

from __future__ import annotations

__all__ = ["THOROUGH"]

# node id (or the prefix of a parametrized test's ids) -> the test in `make test` with its ground
THOROUGH: dict[str, str] = {
    # -- the distributed step: the two-process step and the hung rank stay
    "tests/test_dist_step.py::test_every_default_mesh_1_to_8[3]": "test_every_default_mesh_1_to_8[4]",
    "tests/test_dist_step.py::test_every_default_mesh_1_to_8[8]": "test_every_default_mesh_1_to_8[4]",
    "tests/test_dist_step.py::test_layouts[4-2-2-2]": "test_every_default_mesh_1_to_8[4] (dp, tp, ep)",
    "tests/test_dist_step.py::test_two_agents_c10d_rendezvous": (
        "test_agent_is_torchrun_with_its_exit_status (the agent), test_two_process_gloo"
    ),
    # -- the guard's scenarios: each rule's stop stays, a second scenario of one rule moves
    "tests/test_swap_scenarios.py::test_envbuild_stops_pypi_triton": (
        "test_envbuild_stops_torch_ge_212 (the protected set's check, after the step)"
    ),
    "tests/test_swap_scenarios.py::test_envbuild_stops_acknowledged_overlap_with_the_wrong_winner": (
        "test_envbuild_stops_unacknowledged_overlap, test_envbuild_accepts_acknowledged_overlap"
    ),
    "tests/test_swap_scenarios.py::test_envbuild_strict_stops_on_unmet_requirement": (
        "test_envbuild_warns_on_unmet_requirement (the same check, its verdict)"
    ),
    "tests/test_swap_scenarios.py::test_envbuild_installs_the_overlap_winner_last_within_one_step[pip]": (
        "its [uv] variant"
    ),
    "tests/test_swap_scenarios.py::test_envbuild_stops_exact_pin": (
        "test_envbuild_stops_torch_ge_212 (the same guard after the step)"
    ),
    "tests/test_swap_scenarios.py::test_envbuild_prevents_eager_upgrade": (
        "test_envbuild_stops_torch_ge_212 (the constraint that holds torch)"
    ),
    # -- provision's interruptions: the killed installer and the resumed lock provision stay
    "tests/test_provision_cpu.py::test_killed_mid_step_resumes_and_converges": (
        "test_faults.py::test_killed_installer_fails_the_step_and_the_next_run_converges,"
        " test_fromlock.py::test_an_interrupted_lock_provision_resumes_where_it_stopped"
    ),
    # -- the README walk: make docs-snippets runs it; the tour's other pages' checks stay
    "tests/test_tour.py::test_every_readme_command_runs_and_prints_what_the_readme_shows": (
        "make docs-snippets; test_tour.py's page checks"
    ),
    # -- a second backend's variant (the uv variant stays in make test)
    "tests/test_day2_offline.py::test_git_requirement_reaches_an_offline_host[pip]": "its [uv] variant",
    "tests/test_sources_by_hash.py::test_a_dead_index_is_a_notice_when_the_mirror_serves_the_files[pip]": (
        "its [uv] variant"
    ),
    "tests/test_sources_by_hash.py::test_a_forged_copy_beside_the_real_file_is_never_installed[pip]": (
        "its [uv] variant"
    ),
    "tests/test_adopt.py::test_adopt_installs_around_torch[pip]": "its [uv] variant",
    "tests/test_locked_git_step.py::test_locked_git_step_installs[pip]": "its [uv] variant",
    "tests/test_plan.py::test_plan_json_argv_is_what_provision_runs[pip]": "its [default] variant",
    "tests/test_prefetch.py::test_provision_with_prefetch[pip]": "its [uv] variant",
    "tests/test_progress_display.py::test_a_person_sees_each_step_download_and_end_ok[pip]": (
        "its [uv] variant"
    ),
    "tests/test_import_warmup.py::test_warmup_stays_off_where_it_cannot_help[pip]": "its [uv] variant",
    "tests/test_provision_safety.py::test_a_password_in_an_index_url_reaches_no_file[pip]": (
        "its [uv] variant"
    ),
    "tests/test_fromlock_records.py::test_the_pip_backend_records_index_files_as_pip_installs_them[old-pip]": (
        "its [pip-26] variant (the pylock.toml install; the name==version lines are old pip's)"
    ),
    # -- one more run of a behaviour shown elsewhere
    "tests/test_provision_safety.py::test_receipt_diff_of_one_install_at_two_roots_finds_no_drift": (
        "test_receipt_roots.py::test_a_distribution_is_what_was_installed_not_where"
    ),
    "tests/test_provision_safety.py::test_switching_the_backend_says_so": (
        "test_failed_provision.py::test_backend_pip_on_a_venv_uv_made_is_refused_before_anything_runs"
    ),
    "tests/test_fromlock.py::test_a_venv_with_another_torch_is_refused_and_the_locks_torch_is_adopted": (
        "test_adopt.py::test_adopt_without_torch_in_the_environment_exits_6,"
        " test_fromlock_sync.py::test_a_lock_that_leaves_torch_to_the_base_image_provisions_onto_its_torch"
    ),
    "tests/test_fromlock.py::test_rebuild_mismatched_installs_the_sdist_built_against_the_locks_torch": (
        "test_fromlock_buildreqs.py::test_an_sdist_whose_build_requires_torch_builds_against_the_installed_torch,"
        " test_rebuild_mismatched_plans_the_sdist_from_the_lock_index"
    ),
    "tests/test_fromlock.py::test_a_git_pin_that_builds_against_torch_goes_through_the_build_cache": (
        "test_fromlock_records.py::test_git_pins_are_recorded_as_uv_sync_records_them,"
        " test_build_cache.py::test_a_stacks_locked_files_come_from_the_build_cache_by_sha256"
    ),
    "tests/test_fromlock_buildreqs.py::test_prefetched_builds_are_the_ones_installed": (
        "test_fromlock_buildreqs.py::test_packaged_root_member_and_sdist_install_as_uv_sync_installs_them,"
        " test_prefetch.py::test_provision_with_prefetch[uv]"
    ),
    "tests/test_fromlock_offline.py::test_a_base_image_gets_only_what_it_lacks": (
        "test_fromlock_sync.py::test_a_lock_that_leaves_torch_to_the_base_image_provisions_onto_its_torch"
    ),
    "tests/test_lock.py::test_lock_files_install_by_hand_with_require_hashes": (
        "test_lock.py::test_provision_installs_from_the_lock (the same files, by envbuild)"
    ),
    "tests/test_build_cache.py::test_an_http_cache_is_read_only": (
        "test_build_cache.py::test_a_stacks_locked_files_come_from_the_build_cache_by_sha256"
    ),
    "tests/test_build_cache.py::test_a_host_that_waited_too_long_builds_for_itself": (
        "test_build_cache.py::test_a_dead_or_frozen_builder_is_taken_over[kill]"
    ),
    "tests/test_build_cache.py::test_a_dead_or_frozen_builder_is_taken_over[stop]": "its [kill] variant",
    "tests/test_lock_target.py::test_check_lock_reads_requirements_for_the_target_cpu": (
        "test_lock_target.py::test_lock_for_another_python_uses_uv_and_installs_on_the_target"
    ),
    "tests/test_lock_model.py::test_a_bypassed_lock_is_refused_and_no_lock_is_recorded": (
        "test_check_lock.py::test_hand_edited_file_is_stale"
    ),
    # -- the fuzzing: make fuzz runs it with many more examples; the render round trips stay
    "tests/test_fuzz.py::test_fuzz_plan_check_lock_and_docker": "make fuzz; test_render_roundtrip.py",
    # -- second batch (2026-11-28: make test was 17 min after the first)
    "tests/test_tour.py::test_an_output_edited_by_hand_is_caught": (
        "make docs-snippets (the README walk, as the test above); test_tour.py's page checks"
    ),
    "tests/test_seed_twin.py": (
        "the twin's pieces one by one: test_lock.py (a stack lock, hash-pinned, installed),"
        " test_swap_scenarios.py (the guard on the nightly), test_provision_cpu.py (a profile end"
        " to end), test_check_lock.py (the gate on an own lock)"
    ),
    "tests/test_ci_integrations.py::test_pre_commit_runs_the_hook_on_changed_lockfiles": (
        "test_ci_integrations.py's hook file checks; check-lock itself in test_check_lock.py"
    ),
    "tests/test_dist_step.py::test_one_node_does_not_depend_on_the_hostname_resolving": (
        "test_two_process_gloo (one node, the same rendezvous)"
    ),
    "tests/test_dist_step.py::test_every_default_mesh_1_to_8[1]": "test_every_default_mesh_1_to_8[2]",
    "tests/test_dist_step.py::test_layouts[2-2-1-1]": "test_every_default_mesh_1_to_8[2]",
    "tests/test_fromlock_records.py::test_the_pip_backend_records_index_files_as_pip_installs_them[pip-26]": (
        "test_fromlock_records.py::test_git_pins_are_recorded_as_uv_sync_records_them (the records,"
        " uv); test_fromlock_sync.py's uv sync differential"
    ),
    "tests/test_day2_offline.py::test_git_requirement_reaches_an_offline_host[uv]": (
        "test_locked_git_step.py::test_locked_git_step_installs[uv],"
        " test_fromlock_offline.py::test_provision_offline_from_a_mirrored_wheelhouse_equals_uv_sync"
    ),
    "tests/test_faults.py::test_download_that_stalls_is_stopped_by_the_step_timeout": (
        "test_net_retry.py::test_a_black_hole_fails_within_the_deadline,"
        " test_faults.py::test_hung_import_check_is_stopped_and_named (the step's timeout)"
    ),
    "tests/test_adopt.py::test_adopt_step_by_step_like_the_image": (
        "test_fromlock_docker.py::test_the_slices_provision_layer_by_layer"
    ),
    "tests/test_fromlock_selection.py::test_a_missing_package_is_drift_and_a_rerun_puts_it_back": (
        "test_fromlock_selection.py::test_a_narrower_selection_removes_what_it_no_longer_installs"
    ),
    "tests/test_provision_messages.py::test_force_links_says_once_where_it_moved_things": (
        "test_layout.py (the links and --force-links)"
    ),
    "tests/test_wheelhouse_build.py::test_build_strips_retags_records_and_installs[pure_pkg": (
        "its c_ext variant"
    ),
    "tests/test_smoke.py::test_the_proofs_leave_bytecode_even_under_pythondontwritebytecode": (
        "test_import_warmup.py (the bytecode a provision writes)"
    ),
    # -- third batch (make test was 13 min 36 s after the second)
    "tests/test_public_locks.py::test_public_lock_selections_equal_uv_sync[cosmos-transfer2.5]": (
        "the same test on the other public locks (cosmos-reason2, docling, nanochat, ...)"
    ),
    "tests/test_public_locks.py::test_public_lock_selections_equal_uv_sync[lerobot]": (
        "the same test on the other public locks"
    ),
    "tests/test_gatelocks_tools.py::test_poetry_lock": (
        "test_gate.py::test_poetry_torch_per_marker (a lock Poetry wrote, judged)"
    ),
    "tests/test_gatelocks_tools.py::test_pip_compile_requirements": (
        "test_check_lock_anyfile.py's pip-compile locks"
    ),
    "tests/test_build_cache.py::test_a_damaged_cache_entry_is_rebuilt_and_republished": (
        "test_sources_by_hash.py::test_a_file_with_another_sha256_is_never_taken"
    ),
    "tests/test_swap_scenarios.py::test_envbuild_accepts_acknowledged_overlap": (
        "test_envbuild_stops_unacknowledged_overlap; test_gate's reviewed exceptions"
    ),
    "tests/test_swap_scenarios.py::test_envbuild_stops_force_reinstall": (
        "test_envbuild_stops_torch_ge_212 (the guard's identity of torch)"
    ),
    "tests/test_day2_lock.py::test_needed_by_another_pin_and_spec_changed": (
        "test_day2_lock.py::test_pins_move_only_when_asked[uv]"
    ),
    "tests/test_dist_step.py::test_every_default_mesh_1_to_8[2]": (
        "test_two_process_gloo (2 processes), test_every_default_mesh_1_to_8[4]"
    ),
    "tests/test_faults.py::test_hung_import_check_is_stopped_and_named": (
        "test_dist_step.py::test_hung_rank_is_named (a hung child named and stopped)"
    ),
    "tests/test_lock.py::test_git_ref_that_does_not_resolve[None": "its [no-such-branch] variant",
    "tests/test_lock.py::test_provision_refuses_a_broken_lock[option": "its other variants",
    "tests/test_check_lock.py::test_static_rules_on_torch_requirements[vision-pin": (
        "its other variants"
    ),
    "tests/test_gate.py::test_uv_conflicting_accelerator_extras": (
        "test_gate_conflicts.py::test_selections_equal_what_uv_export_accepts_and_installs"
    ),
    "tests/test_lock_target.py::test_check_lock_fails_a_pull_request_that_changes_the_spec_without_its_lock": (
        "test_check_lock.py::test_stale_lock_missing_hash_and_missing_file"
    ),
    "tests/test_lock_target.py::test_an_aarch64_target_locks_and_checks_its_aarch64_only_protected_package": (
        "test_lock_target.py::test_target_platform_changes_the_resolution"
    ),
    # -- fourth batch (make test was 12 min 25 s after the third)
    "tests/test_fromlock_buildreqs.py::test_build_constraints_bind_the_build_requirements": (
        "test_fromlock_buildreqs.py::test_packaged_root_member_and_sdist_install_as_uv_sync_installs_them"
    ),
    "tests/test_fromlock_buildreqs.py::test_an_image_layer_builds_its_sdist_from_the_projects_index": (
        "test_fromlock_docker.py::test_the_slices_provision_layer_by_layer"
    ),
    "tests/test_fromlock_selection.py::test_the_entry_of_the_index_uv_installs": (
        "test_fromlock_sync.py::test_provision_installs_what_uv_sync_installs"
    ),
    "tests/test_day2_wheelhouse.py::test_torch_move_lists_the_wheels_to_rebuild": (
        "test_day2_wheelhouse.py::test_check_lock_online_names_what_left_the_index"
    ),
    "tests/test_swap_scenarios.py::test_envbuild_warns_on_unmet_requirement": (
        "test_naive_no_deps_leaves_an_unmet_requirement (the planted case);"
        " test_gate.py::test_torch_without_its_runtime (a missing requirement found)"
    ),
    "tests/test_dist_step.py::test_every_default_mesh_1_to_8[4]": (
        "test_two_process_gloo (a healthy step), test_hung_rank_is_named (a planted hang),"
        " test_mesh_checked_before_launch_agrees_with_the_worker (the dp/tp/ep mesh)"
    ),
    # -- a fifth batch (the session that added test_prepared_reuse and test_prepare_warmup)
    "tests/test_prepare_warmup.py::test_a_lock_provision_links_the_prepared_import_bytecode": (
        "test_harvest_links_only_the_bytecode_the_import_would_trust (the harvest, a real import"
        " trusting what was linked); test_import_warmup.py (the warm-up in real provisions)"
    ),
    "tests/test_lock.py::test_provision_refuses_a_broken_lock[missing": (
        "its [hash-malformed] variant (the same refusal, before step 1)"
    ),
    "tests/test_fromlock.py::test_a_kept_package_is_looked_at_by_size": (
        "test_a_venv_with_another_torch_is_refused_and_the_locks_torch_is_adopted (adoption, and"
        " torch's own files hashed)"
    ),
    # -- sixth batch (make test at 12 minutes on a clean clone): three real provisions of a stack
    "tests/test_launcher.py::test_after_activate_envbuild_is_the_one_that_made_the_venv": (
        "test_the_launcher_is_one_shell_word_per_path_and_runs_envbuild (the launcher's text, read"
        " back by a real sh, runs this envbuild); test_provision_cpu.py (activate sources the"
        " overlay in a provisioned venv)"
    ),
    "tests/test_check_lock.py::test_dry_run_finds_what_the_resolver_would_install[needs-torch-212": (
        "its [mamba-like] variant (the same dry-run resolution, another finding)"
    ),
    "tests/test_gate_pythons.py::test_every_row_holds_for_each_python_it_names[docling/uv.lock]": (
        "the other ten locks' variants (cosmos-predict2.5 and lerobot: uv.lock workspaces as large)"
    ),
    "tests/test_gate_conflicts.py::test_overlapping_conflicts_judge_only_what_uv_allows": (
        "test_selections_equal_what_uv_export_accepts_and_installs (every conflict graph generated,"
        " overlapping sets among them, judged against what uv export accepts)"
    ),
}
