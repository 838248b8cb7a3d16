"""The seccomp filter of the python grader sandbox, compiled by libseccomp and handed to bubblewrap.

bwrap takes a compiled classic-BPF program (`--seccomp FD`); writing BPF by hand means getting the
architecture checks, the x32 ABI and syscall numbers right for every machine, which is exactly what libseccomp
(the library systemd, podman and Docker build their filters with) does. Its Python bindings ship for the
distribution's own interpreter only (Debian's python3-seccomp is not importable from a venv or another
Python), and the PyPI wrappers are unmaintained ctypes shims; so the five libseccomp calls we need are made
here through ctypes, against the libseccomp2 shared library that Debian installs with systemd and apt.

The filter denies, with EPERM, what a grader never needs and what would let it reach outside its unit: other
processes' memory and file descriptors (ptrace, process_vm_readv/writev, pidfd_getfd, kcmp), namespaces
(setns, unshare, and clone/clone3 with namespace flags cannot be filtered by argument for clone3, so
bwrap's --disable-userns and the missing capabilities cover those), mounts, the kernel keyring, loading
kernel modules or BPF, perf events, userfaultfd, memfd_create (memory no tmpfs size and no per-process limit
counts when cgroups are missing) and io_uring (a second system-call path seccomp does not see).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import os

DENIED = (
    "ptrace", "process_vm_readv", "process_vm_writev", "pidfd_getfd", "kcmp",
    "setns", "unshare", "mount", "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen",
    "fsmount", "fsconfig", "fspick", "mount_setattr",
    "keyctl", "add_key", "request_key",
    "init_module", "finit_module", "delete_module", "kexec_load", "kexec_file_load", "bpf", "perf_event_open",
    "userfaultfd", "memfd_create", "memfd_secret", "io_uring_setup", "io_uring_enter", "io_uring_register",
    "quotactl", "swapon", "swapoff", "reboot", "acct", "syslog", "personality", "lookup_dcookie",
    "open_by_handle_at", "name_to_handle_at", "iopl", "ioperm",
)
SCMP_ACT_ALLOW = 0x7FFF0000


def _errno_action(code: int) -> int:
    return 0x00050000 | (code & 0xFFFF)  # SCMP_ACT_ERRNO(code)


class SeccompUnavailable(RuntimeError):
    """libseccomp is missing or refused the filter: the sandbox cannot be built as promised."""


def _library() -> ctypes.CDLL:
    name = ctypes.util.find_library("seccomp") or "libseccomp.so.2"
    try:
        lib = ctypes.CDLL(name, use_errno=True)
    except OSError as exc:
        raise SeccompUnavailable(f"libseccomp not found ({exc}); install Debian's libseccomp2") from None
    lib.seccomp_init.restype = ctypes.c_void_p
    lib.seccomp_init.argtypes = [ctypes.c_uint32]
    lib.seccomp_syscall_resolve_name.restype = ctypes.c_int
    lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
    lib.seccomp_rule_add.restype = ctypes.c_int
    lib.seccomp_rule_add.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint]
    lib.seccomp_export_bpf.restype = ctypes.c_int
    lib.seccomp_export_bpf.argtypes = [ctypes.c_void_p, ctypes.c_int]
    lib.seccomp_release.restype = None
    lib.seccomp_release.argtypes = [ctypes.c_void_p]
    return lib


def compile_filter(denied: tuple[str, ...] = DENIED) -> bytes:
    """The compiled BPF program (native architecture) that denies `denied` with EPERM and allows the rest.
    Names this kernel's headers do not know are skipped (they cannot be called either)."""
    lib = _library()
    ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
    if not ctx:
        raise SeccompUnavailable("seccomp_init failed")
    try:
        action = _errno_action(errno.EPERM)
        for name in denied:
            number = lib.seccomp_syscall_resolve_name(name.encode())
            if number < 0:  # __NR_SCMP_ERROR: not a system call on this architecture
                continue
            rc = lib.seccomp_rule_add(ctx, action, number, 0)
            if rc < 0:
                raise SeccompUnavailable(f"seccomp_rule_add({name}) failed: {os.strerror(-rc)}")
        fd = os.memfd_create("rfteval-seccomp") if hasattr(os, "memfd_create") else os.open(
            "/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)
        try:
            rc = lib.seccomp_export_bpf(ctx, fd)
            if rc < 0:
                raise SeccompUnavailable(f"seccomp_export_bpf failed: {os.strerror(-rc)}")
            size = os.lseek(fd, 0, os.SEEK_END)
            program = os.pread(fd, size, 0)
        finally:
            os.close(fd)
    finally:
        lib.seccomp_release(ctx)
    if not program or len(program) % 8:
        raise SeccompUnavailable("libseccomp produced no BPF program")
    return program
