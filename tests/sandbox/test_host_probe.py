"""When the python grader sandbox cannot be built: each step is made to fail on its own (a fake bwrap on PATH that
exits as the kernel would, libseccomp missing, an unwritable cgroup root), and each gets its own one-line reason
and remedy. Host facts (sysctls, a container marker) come from a stand-in root (sandbox.HOST_FACTS_ENV)."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rfteval import sandbox
from rfteval.sandbox import (
    CGROUP_ROOT_ENV,
    HOST_FACTS_ENV,
    Host,
    HostFacts,
    WorkerPool,
    cgroup,
    host_probe,
    refusal_reason,
)
from tests.support import REPO
from tests.support.optional import missing
from tests.support.sandbox_samples import python_grader_case

# What bubblewrap prints, as the last line of stderr, when each step is refused (bubblewrap 0.8-0.10)
DEBIAN_USERNS = ("bwrap: No permissions to creating new namespace, likely because the kernel does not allow "
                 "non-privileged user namespaces. On e.g. debian this can be enabled with "
                 "'sysctl kernel.unprivileged_userns_clone=1'.")
APPARMOR_USERNS = "bwrap: setting up uid map: Permission denied"  # Ubuntu 24.04, the GitHub Actions runner
NO_USERNS = "bwrap: Creating new namespace failed: No space left on device"  # user.max_user_namespaces=0
DOCKER_USERNS = "bwrap: Creating new namespace failed: Operation not permitted"  # Docker's seccomp profile
DOCKER_MOUNT = "bwrap: Can't mount proc on /newroot/proc: Operation not permitted"  # Docker's AppArmor profile
KERNEL_SECCOMP = "bwrap: prctl(PR_SET_SECCOMP): Invalid argument"


@pytest.fixture
def fresh_probe() -> Iterator[None]:
    """The probe's caches cleared before and after, so a test's broken host never reaches another test."""
    cgroup.cgroup_parents.cache_clear()
    host_probe.seccomp_program.cache_clear()
    yield
    cgroup.cgroup_parents.cache_clear()
    host_probe.seccomp_program.cache_clear()


def fake_bwrap(directory: Path, message: str, code: int = 1) -> Path:
    """A bwrap that refuses as the kernel or host made the real one refuse: its message on stderr, exit 1."""
    directory.mkdir(parents=True, exist_ok=True)
    script = directory / "bwrap"
    script.write_text(f"#!/bin/sh\necho {json.dumps(message)} >&2\nexit {code}\n")
    script.chmod(0o755)
    return directory


def facts_root(base: Path, sysctls: dict[str, str], container: bool = False) -> Path:
    """A stand-in for / holding only the given sysctls (and /.dockerenv when `container`)."""
    root = base / "host"
    for name, value in sysctls.items():
        path = root.joinpath("proc", "sys", *name.split("."))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(value + "\n")
    root.mkdir(parents=True, exist_ok=True)
    if container:
        (root / ".dockerenv").write_text("")
    return root


CASES = {
    # id: (bwrap's last line, sysctls, in a container, words the reason must hold)
    "debian-sysctl": (DEBIAN_USERNS, {"kernel.unprivileged_userns_clone": "0"}, False,
                      ["user namespaces are refused by the kernel", "kernel.unprivileged_userns_clone=1"]),
    "ubuntu-apparmor": (APPARMOR_USERNS, {"kernel.apparmor_restrict_unprivileged_userns": "1"}, False,
                        ["refused by AppArmor", "kernel.apparmor_restrict_unprivileged_userns=0",
                         "AppArmor profile", "CI hosts"]),
    "max-user-namespaces": (NO_USERNS, {"user.max_user_namespaces": "0"}, False,
                            ["refused by the kernel", "user.max_user_namespaces=15000"]),
    "docker-userns": (DOCKER_USERNS, {}, True,
                      ["refused in this container", "--security-opt seccomp=unconfined",
                       "--security-opt apparmor=unconfined"]),
    "docker-mount": (DOCKER_MOUNT, {}, True, ["cannot mount", "in this container", "--security-opt"]),
    "kernel-seccomp": (KERNEL_SECCOMP, {}, False, ["seccomp is unavailable", "CONFIG_SECCOMP_FILTER"]),
    "bare-host-userns": (DOCKER_USERNS, {}, False, ["refused by the kernel or a security module", "CI hosts"]),
}


@pytest.mark.parametrize("case", list(CASES), ids=list(CASES))
def test_a_refusal_by_bubblewrap_names_its_step_and_the_hosts_remedy(
        case: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_probe: None) -> None:
    message, sysctls, container, words = CASES[case]
    monkeypatch.setenv("PATH", f"{fake_bwrap(tmp_path / 'bin', message)}:{os.environ['PATH']}")
    monkeypatch.setenv(HOST_FACTS_ENV, str(facts_root(tmp_path, sysctls, container)))
    if os.getuid() == 0 and cgroup.cgroup_parents() is None:
        pytest.skip("root without a writable cgroup here: that refusal comes before bubblewrap's")
    reason = host_probe.probe_host().refused
    assert reason is not None and "\n" not in reason
    for word in words:
        assert word in reason, (word, reason)
    assert message.removeprefix("bwrap: ")[:40] in reason  # bubblewrap's own words, for a search


def test_the_reasons_differ_cause_by_cause() -> None:
    reasons = {refusal_reason(message, HostFacts(
        apparmor_restricts_userns="kernel.apparmor_restrict_unprivileged_userns" in sysctls,
        userns_clone_off="kernel.unprivileged_userns_clone" in sysctls,
        no_user_namespaces="user.max_user_namespaces" in sysctls, container=container)).replace(
            message.removeprefix("bwrap: "), "")  # the reason and remedy, without bubblewrap's own words
        for message, sysctls, container, _ in CASES.values()}
    assert len(reasons) == len(CASES)


def test_apparmor_is_named_only_where_it_restricts_user_namespaces() -> None:
    assert "AppArmor" in refusal_reason(APPARMOR_USERNS, HostFacts(apparmor_restricts_userns=True))
    assert "AppArmor (Ubuntu" not in refusal_reason(APPARMOR_USERNS, HostFacts(userns_clone_off=True))


def test_bwrap_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fresh_probe: None) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))  # no bwrap on it
    reason = host_probe.probe_host().refused
    assert reason is not None and "not installed" in reason and "apt-get install bubblewrap" in reason


def test_seccomp_library_missing(monkeypatch: pytest.MonkeyPatch, fresh_probe: None) -> None:
    if host_probe.shutil.which("bwrap") is None:
        missing("bubblewrap is not installed: that refusal comes first", "sandbox")
    import ctypes

    from rfteval.sandbox import seccomp

    real = ctypes.CDLL

    def no_libseccomp(name: str | None, *args: object, **kwargs: object) -> ctypes.CDLL:
        if name is not None and "seccomp" in name:
            raise OSError(f"{name}: cannot open shared object file: No such file or directory")
        return real(name, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(seccomp.ctypes, "CDLL", no_libseccomp)
    reason = host_probe.probe_host().refused
    assert reason is not None and reason.startswith("seccomp is unavailable") and "libseccomp2" in reason


def test_root_with_an_unwritable_cgroup_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                             fresh_probe: None) -> None:
    if host_probe.shutil.which("bwrap") is None:
        missing("bubblewrap is not installed: that refusal comes first", "sandbox")
    readonly = tmp_path / "cgroup"
    readonly.mkdir()
    readonly.chmod(0o555)  # and nothing under it: no controller to create a cgroup in
    monkeypatch.setenv(CGROUP_ROOT_ENV, str(readonly))
    assert cgroup.cgroup_parents() is None
    reason = host_probe.probe_host().refused
    if os.getuid() != 0:
        assert reason is None  # RLIMIT_NPROC binds a normal user: no cgroup is needed for the process limit
        return
    assert reason is not None and "no writable cgroup" in reason and str(readonly) in reason
    assert "normal user" in reason and "Delegate=yes" in reason


@pytest.mark.slow
def test_without_a_cgroup_the_start_says_the_memory_limit_is_per_process(
        monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setattr(host_probe, "_HOST", Host(None, False, "no sandbox in this test"))
    monkeypatch.setattr(host_probe, "_NOTED", set())
    with caplog.at_level(logging.WARNING, logger="rfteval.sandbox"), \
            WorkerPool(workers=1, timeout_s=10, memory_mb=300, unsafe=True) as pool:
        (result,) = pool.grade("def grade(s, i):\n    return 0.5\n", [({}, {})])
        pool.grade("def grade(s, i):\n    return 0.25\n", [({}, {})])
    assert result.score == 0.5
    lines = [r.getMessage() for r in caplog.records if r.name == "rfteval.sandbox"]
    assert len(lines) == 1 and "--grader-memory 300 MB is a limit per process" in lines[0], lines


@pytest.mark.slow
@pytest.mark.parametrize("cause", ["ubuntu-apparmor", "no-cgroup"])
def test_the_cli_refuses_in_one_line_naming_the_cause(cause: str, tmp_path: Path) -> None:
    if cause == "no-cgroup" and os.getuid() != 0:
        pytest.skip("only root needs a cgroup to run python graders")
    grader, data, env = python_grader_case(tmp_path)
    if cause == "ubuntu-apparmor":
        env["PATH"] = f"{fake_bwrap(tmp_path / 'bin', APPARMOR_USERNS)}:{env.get('PATH', '/usr/bin:/bin')}"
        env[HOST_FACTS_ENV] = str(facts_root(tmp_path, {"kernel.apparmor_restrict_unprivileged_userns": "1"}))
        words = ["AppArmor", "apparmor_restrict_unprivileged_userns=0"]
    else:
        env[CGROUP_ROOT_ENV] = str(tmp_path / "no-cgroups-here")
        words = ["no writable cgroup"]
    proc = subprocess.run([sys.executable, "-c", "from rfteval.cli.app import main; main()", "validate", "grader",
                           str(grader), "--dataset", str(data)], env=env, capture_output=True, text=True,
                          timeout=120, check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--unsafe-python-graders" in lines[0] and "gives up" in lines[0], lines
    for word in words:
        assert word in lines[0], (word, lines[0])


@pytest.mark.slow
def test_the_variable_is_the_flag_for_every_command(tmp_path: Path) -> None:
    """RFTEVAL_UNSAFE_PYTHON_GRADERS=1, as README says, is --unsafe-python-graders: on a host whose sandbox is
    refused the command runs the grader (it used to be read by library callers only, and a command refused)."""
    grader, data, env = python_grader_case(tmp_path)
    env[CGROUP_ROOT_ENV] = str(tmp_path / "no-cgroups-here")
    if os.getuid() != 0:  # only root needs a cgroup: refuse it another way
        env["PATH"] = f"{fake_bwrap(tmp_path / 'bin', APPARMOR_USERNS)}:{env.get('PATH', '/usr/bin:/bin')}"
        env[HOST_FACTS_ENV] = str(facts_root(tmp_path, {"kernel.apparmor_restrict_unprivileged_userns": "1"}))
    command = [sys.executable, "-c", "from rfteval.cli.app import main; main()", "validate", "grader", str(grader),
               "--dataset", str(data), "--reference-template", "{{item.reference_answer}}"]
    refused = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    ran = subprocess.run(command, env={**env, "RFTEVAL_UNSAFE_PYTHON_GRADERS": "1"}, capture_output=True, text=True,
                         timeout=120, check=False)
    assert refused.returncode == 2 and "--unsafe-python-graders" in refused.stderr
    assert ran.returncode == 0, ran.stderr
    assert "reference answers graded as outputs: 1 of 1 items" in ran.stdout


def ci_job() -> dict[str, Any]:
    import yaml

    text = (REPO / "docs" / "sandbox.md").read_text()
    section = text.split("## CI hosts", 1)[1]
    return yaml.safe_load(section.split("```yaml\n", 1)[1].split("```", 1)[0])


def test_the_ci_hosts_job_parses_and_sets_up_the_sandbox() -> None:
    job = ci_job()["jobs"]["gate"]
    assert job["runs-on"] == "ubuntu-24.04"
    runs = {step.get("name", ""): step.get("run", "") for step in job["steps"]}
    assert any("apt-get install" in r and "bubblewrap" in r for r in runs.values())
    profile_step = next(r for r in runs.values() if "apparmor_parser" in r)
    printf = profile_step.split("| sudo tee")[0]  # the profile the step writes, as the runner's shell makes it
    made = subprocess.run(["sh", "-c", printf], capture_output=True, text=True, timeout=10, check=True).stdout
    assert made.splitlines() == ["abi <abi/4.0>,", "include <tunables/global>",
                                 "profile bwrap /usr/bin/bwrap flags=(unconfined) {", "  userns,", "}"]


@pytest.mark.slow
def test_the_ci_jobs_sandbox_check_says_what_this_host_gives() -> None:
    check = next(s["run"] for s in ci_job()["jobs"]["gate"]["steps"] if "sandbox holds" in s.get("name", ""))
    code = check.split('python -c "', 1)[1].rsplit('"', 1)[0]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    refused = sandbox.host().refused
    assert proc.returncode == (0 if refused is None else 1), proc.stderr
    assert proc.stdout.strip() == (refused or "sandbox ok")
