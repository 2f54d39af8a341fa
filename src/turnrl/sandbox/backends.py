"""Command lines that confine one sandboxed command, and the choice of backend.

Three backends, strongest first:

- ``bwrap``: bubblewrap. A fresh mount namespace whose root is a tmpfs holding only read-only
  binds of ``/usr`` (``/bin``, ``/lib*`` are symlinks into it), a few ``/etc`` files, the Python
  prefixes (``sys.base_prefix``, ``sys.prefix``) and ``extra_ro_binds``, with turnrl's own
  package masked wherever it is installed (no grader, task data or gold corpus inside, in any
  install mode: see `hidden_paths`); the workspace is the only
  writable host path, mounted at ``/workspace``; ``/tmp`` is a private, size-capped tmpfs. New PID,
  network, IPC, UTS and cgroup namespaces, a new session, and ``--die-with-parent``.
- ``unshare`` (fallback): new network, PID and mount namespaces (``/proc`` remounted) and rlimits,
  but the host filesystem stays visible: as root the command runs as ``SANDBOX_UID``, so it reads
  only world-readable files (a Python under a 0700 ``/root`` is unusable; pass a world-readable
  one) and writes only world-writable places; not root, it has the caller's own rights. The
  command runs in the workspace's host path.
- ``none``: rlimits and the uid drop only, no namespaces: network and files as above, background
  processes that leave the process group survive, and ``max_processes`` is shared by every process
  of that uid. Not a sandbox; the last resort.

Every backend runs the command as ``prlimit ... timeout ... COMMAND`` (see `_limits_argv`).

Fork bombs: RLIMIT_NPROC is ignored for uid 0 and counted per uid across the machine, so when we
run as root the command first drops to ``SANDBOX_UID`` (setpriv) and then enters a user namespace of
its own (``unshare --user``): since Linux 5.14 the process count is kept per user namespace, so
each sandbox gets its own ``max_processes`` and concurrent sandboxes do not eat each other's
budget. The limits are applied by ``prlimit`` *inside* that namespace because a namespace's
ceiling for its parent's count is its creator's limit at creation (a low limit set before would
again be shared by all sandboxes). Not root: bubblewrap itself makes the user namespace.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import math
import os
import shutil
import subprocess
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from collections.abc import Sequence


@dataclass(frozen=True)
class Limits:
    """Per-command resource limits; all apply to each sandbox separately."""

    cpu_seconds: int = 10  # RLIMIT_CPU per process (SIGXCPU, then SIGKILL a second later)
    memory_mb: int = 1024  # RLIMIT_AS per process
    max_processes: int = 64  # RLIMIT_NPROC, counted inside the sandbox's own user namespace
    file_size_mb: int = 64  # RLIMIT_FSIZE (SIGXFSZ)
    wall_seconds: float = 20.0  # then SIGKILL to everything in the sandbox
    max_output_bytes: int = 65536  # stdout+stderr kept: head and tail halves around a marker
    tmpfs_mb: int = 256  # size of the private /tmp (and /dev/shm) under bwrap

    def __post_init__(self) -> None:
        bad = [f"{name}={value!r}" for name, value in vars(self).items() if not value > 0]
        if bad:
            raise ValueError(f"Limits must be positive: {', '.join(bad)}")


Backend = Literal["bwrap", "unshare", "none"]
BACKENDS: tuple[Backend, ...] = ("bwrap", "unshare", "none")

WORKSPACE_MOUNT = "/workspace"  # where the bwrap backend mounts the workspace (cwd inside)
SANDBOX_UID = 65534  # nobody: the uid the command runs as when turnrl runs as root
SANDBOX_HOME = "/tmp"  # HOME inside: the private tmpfs, so dotfiles never land in the workspace

# /etc entries the usual tools need (each is one bind mount, so the list is kept short); the
# rest of /etc stays hidden. Certificates and resolver config only matter with network.
_ETC_FILES = (
    "passwd",
    "group",
    "nsswitch.conf",
    "hosts",
    "ld.so.cache",
    "localtime",
    "alternatives",  # Debian's /usr/bin/* -> /etc/alternatives/* symlinks
)
_ETC_NETWORK_FILES = ("resolv.conf", "host.conf", "gai.conf", "ssl", "ca-certificates")

log = logging.getLogger(__name__)


def is_root() -> bool:
    return os.geteuid() == 0


def _limits_argv(limits: Limits) -> list[str]:
    """prlimit, then a backstop timeout, in front of the command.

    The soft CPU limit sends SIGXCPU, the hard one a second later SIGKILL. The caller enforces
    ``wall_seconds``; the backstop (5 s later) only matters if the caller died in the instant
    before bwrap armed its parent-death signal, so no sandbox outlives it for long. It stays in
    the caller's process group (--foreground); the namespaces end the command's children.
    """
    mib = 1024 * 1024
    return [
        "prlimit",
        f"--cpu={limits.cpu_seconds}:{limits.cpu_seconds + 1}",
        f"--as={limits.memory_mb * mib}",
        f"--nproc={limits.max_processes}",
        f"--fsize={limits.file_size_mb * mib}",
        "--core=0",
        "--",
        "timeout",
        "--foreground",
        "--signal=KILL",
        f"{math.ceil(limits.wall_seconds) + 5}s",
    ]


def _drop_privileges_argv(*, own_userns: bool = True) -> list[str]:
    """As root: become SANDBOX_UID with no caps, then (own_userns) a private user namespace so
    the process count is per sandbox. Not root: nothing to drop."""
    if not is_root():
        return []
    uid = str(SANDBOX_UID)
    setpriv = [
        "setpriv",
        f"--reuid={uid}",
        f"--regid={uid}",
        "--clear-groups",
        "--inh-caps=-all",
        "--bounding-set=-all",
        "--",
    ]
    if not own_userns:
        return setpriv
    return [*setpriv, "unshare", "--user", f"--map-user={uid}", f"--map-group={uid}", "--"]


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")


def _ancestors(path: str) -> list[str]:
    parents = [str(p) for p in Path(path).parents if str(p) != "/"]
    return parents[::-1]


def hidden_paths(binds: Sequence[str]) -> list[str]:
    """turnrl's own files under the read-only binds: the package (grader, task data, gold
    corpus) and its install records, wherever pip put them (a wheel lands in site-packages,
    inside ``sys.prefix``). Sandboxed code sees empty directories and files in their place."""
    return list(_hidden_paths(tuple(binds)))


@functools.cache  # an installation does not move while the process runs; globbing costs
def _hidden_paths(binds: tuple[str, ...]) -> tuple[str, ...]:
    package = Path(__file__).resolve().parent.parent  # the turnrl package
    found = [package] if any(_under(str(package), b) for b in binds) else []
    for root in {package.parent, *(Path(b) for b in binds)}:
        for site in [root] if root == package.parent else root.glob("lib*/python*/site-packages"):
            found += site.glob("turnrl-*.dist-info")
            found += site.glob("__editable__*turnrl*")
            found += site.glob("*turnrl*.pth")
    paths = sorted({str(p.resolve()) for p in found if any(_under(str(p), b) for b in binds)})
    return tuple(p for p in paths if not any(q != p and _under(p, q) for q in paths))


def bwrap_argv(
    workspace: Path,
    limits: Limits,
    *,
    network: bool,
    extra_ro_binds: Sequence[Path] = (),
) -> list[str]:
    """bubblewrap argv up to (not including) the command."""
    wanted = {str(Path(p)) for p in (sys.base_prefix, sys.prefix, *extra_ro_binds)}
    # Parents first; skip what /usr already shows (a system Python, a venv under /usr/local).
    ro_binds = sorted((p for p in wanted if not _under(p, "/usr")), key=len)
    argv = [
        "bwrap",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sandbox",
        "--die-with-parent",
        "--new-session",
    ]
    if not network:
        argv.append("--unshare-net")
    if is_root():
        # bwrap as root sets up mounts without a user namespace; setpriv needs these two caps.
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv.append("--unshare-user")
    argv += [
        "--ro-bind",
        "/usr",
        "/usr",
        "--symlink",
        "usr/bin",
        "/bin",
        "--symlink",
        "usr/sbin",
        "/sbin",
        "--symlink",
        "usr/lib",
        "/lib",
    ]
    if os.path.exists("/lib64"):
        argv += ["--symlink", "usr/lib64", "/lib64"]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    size = str(limits.tmpfs_mb * 1024 * 1024)
    argv += ["--perms", "1777", "--size", size, "--tmpfs", "/tmp"]
    argv += ["--perms", "1777", "--size", size, "--tmpfs", "/dev/shm"]
    # bwrap (as root) creates missing parents of bind targets with mode 0700: make them 0755.
    parents = sorted(
        {
            a
            for p in (*ro_binds, WORKSPACE_MOUNT, "/etc/passwd")
            for a in _ancestors(p)
            if not any(_under(a, bound) for bound in ("/usr", *ro_binds))
        },
        key=len,
    )
    for parent in parents:
        argv += ["--perms", "0755", "--dir", parent]
    for name in (*_ETC_FILES, *(_ETC_NETWORK_FILES if network else ())):
        argv += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    for path in ro_binds:
        argv += ["--ro-bind", path, path]
    for path in hidden_paths(["/usr", *ro_binds]):
        if os.path.isdir(path):
            argv += ["--perms", "0555", "--tmpfs", path, "--remount-ro", path]
        else:
            argv += ["--ro-bind", "/dev/null", path]
    argv += ["--bind", str(workspace), WORKSPACE_MOUNT, "--chdir", WORKSPACE_MOUNT, "--"]
    return argv + _drop_privileges_argv() + _limits_argv(limits)


def unshare_argv(limits: Limits, *, network: bool) -> list[str]:
    """Fallback: namespaces for network and processes, rlimits, no filesystem isolation."""
    argv = ["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"]
    if not is_root():
        argv += ["--user", "--map-current-user"]
    if not network:
        argv.append("--net")
    # A shell as PID 1 that waits for the command: the command itself must not be PID 1, which
    # ignores default-action signals (even SIGKILL) sent from inside its namespace.
    init = ["/bin/sh", "-c", '"$@"; exit $?', "init"]
    return [*argv, "--", *init, *_drop_privileges_argv(), *_limits_argv(limits)]


def none_argv(limits: Limits) -> list[str]:
    """No namespaces at all; as root the process limit is then shared by all such sandboxes."""
    return [*_drop_privileges_argv(own_userns=False), *_limits_argv(limits)]


def sandbox_argv(
    backend: Backend,
    workspace: Path,
    limits: Limits,
    *,
    network: bool,
    extra_ro_binds: Sequence[Path] = (),
) -> tuple[list[str], str]:
    """(argv prefix, cwd for the sandboxed command as it sees it)."""
    if backend == "bwrap":
        argv = bwrap_argv(workspace, limits, network=network, extra_ro_binds=extra_ro_binds)
        return argv, WORKSPACE_MOUNT
    if backend == "unshare":
        return unshare_argv(limits, network=network), str(workspace)
    if backend == "none":
        return none_argv(limits), str(workspace)
    raise ValueError(f"unknown sandbox backend {backend!r}; expected one of {BACKENDS}")


def prepare_workspace(workspace: Path) -> None:
    """As root, hand the workspace tree to SANDBOX_UID so the command can write there.

    Files the trainer writes as root (edits applied on the host) would otherwise be read-only
    inside. Only entries with another owner are touched, so repeated runs cost one stat each.
    """
    if not is_root():
        return
    uid = SANDBOX_UID
    if os.lstat(workspace).st_uid != uid:
        os.lchown(workspace, uid, uid)
    # fwalk + dir_fd: a symlink swapped in by a command still running in this workspace can
    # never redirect a chown outside it (plain paths would follow symlinked parents).
    for _root, dirs, files, dirfd in os.fwalk(workspace):
        for name in (*dirs, *files):
            with contextlib.suppress(FileNotFoundError):
                if os.stat(name, dir_fd=dirfd, follow_symlinks=False).st_uid != uid:
                    os.chown(name, uid, uid, dir_fd=dirfd, follow_symlinks=False)


@functools.cache
def backend_works(backend: Backend) -> bool:
    """Run ``true`` through this backend once; cached for the life of the process."""
    needed = {"bwrap": "bwrap", "unshare": "unshare", "none": "prlimit"}[backend]
    if shutil.which(needed) is None or (is_root() and shutil.which("setpriv") is None):
        return False
    with tempfile.TemporaryDirectory(prefix="turnrl-probe-") as tmp:
        workspace = Path(tmp)
        prepare_workspace(workspace)
        argv, cwd = sandbox_argv(backend, workspace, Limits(), network=False)
        try:
            done = subprocess.run(
                [*argv, "/bin/sh", "-c", "true"],
                cwd=workspace,
                capture_output=True,
                timeout=30,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            log.debug("sandbox backend %s probe failed: %s", backend, exc)
            return False
    if done.returncode != 0:
        log.debug("sandbox backend %s probe failed: %s", backend, done.stderr.decode()[-500:])
    return done.returncode == 0


_warned: set[str] = set()


def warn_if_weak(backend: Backend) -> None:
    """Loud warning, once per backend and process, when commands run without bubblewrap."""
    if backend == "bwrap" or backend in _warned:
        return
    _warned.add(backend)
    what = {
        "unshare": "falling back to rlimits + `unshare` (network and PID namespaces only): the "
        "host filesystem is visible to sandboxed commands",
        "none": "NO SANDBOX: commands run with rlimits only, with network and host filesystem",
    }[backend]
    message = f"turnrl sandbox: bubblewrap (`bwrap`) is unavailable; {what}. Install `bubblewrap`."
    warnings.warn(message, RuntimeWarning, stacklevel=3)
    log.warning(message)


def sandbox_backend() -> Backend:
    """Which backend a call to ``run_in_sandbox`` would use here.

    ``TURNRL_SANDBOX=bwrap|unshare|none`` forces one; otherwise the strongest that works.
    """
    forced = os.environ.get("TURNRL_SANDBOX", "").strip()
    if forced:
        if forced not in BACKENDS:
            raise ValueError(f"TURNRL_SANDBOX={forced!r}; expected one of {BACKENDS}")
        return forced  # type: ignore[return-value]
    for backend in BACKENDS:
        if backend_works(backend):
            return backend
    raise RuntimeError("no sandbox backend works here: need bwrap, or unshare, or prlimit")
