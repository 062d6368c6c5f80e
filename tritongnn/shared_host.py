"""One copy of the loader's host arrays per host, shared by its ranks.

With ``placement="host"`` the graph (CSC ``indptr``, ``indices``, and
``edge_perm`` with edge attributes) and the feature table stay in host memory,
read by the kernels through UVA. Under ``torchrun`` every rank of a host
would build, relabel and pin its own copy: N ranks, N copies, where a
Papers100M-scale feature table alone is 57 GB and the host has 128-256 GB.

Here the ranks that share a host agree on a leader (their lowest rank). The
leader writes each array once into a file under ``/dev/shm`` (tmpfs: the file
*is* memory); every rank of the host maps the same file ``MAP_SHARED``, so all
of them read the same physical pages, each registering its mapping with CUDA
in place (``host_memory``). Once every rank has mapped the files the leader
unlinks them: the memory lives as long as a mapping does and no name is left
behind. A job's names carry its torchrun id and a random token drawn by rank
0, so concurrent jobs never meet.

Which ranks share a host: those that see the same ``/dev/shm``, the same
kernel (its boot id) and the same tmpfs (its device number), so two
containers on one machine with private ``/dev/shm`` do not count as one
host. Finding them is one ``all_gather_object`` over the default process
group; publishing is two more (the leaders' outcomes, then every rank's
mapping), so an error on one rank is raised on every rank instead of leaving
the others waiting in a collective.

Cleanup: the files exist only between their creation and the second
collective, and are unlinked in a ``finally`` then. A process killed in that
window (SIGKILL) can leave ``/dev/shm/tritongnn-*`` files behind; they hold
no lock and can be removed by hand.
"""
from __future__ import annotations

import errno
import math
import mmap
import os
import re
import socket
import uuid
import warnings

import torch

from .host_memory import _Mapping
from .memory import size

SHM_DIR = "/dev/shm"
_PREFIX = "tritongnn-"


def _map(path: str, shape, dtype: torch.dtype, create: bool, pin_device: torch.device | None) -> torch.Tensor:
    """``[shape]`` ``dtype`` tensor over the file at ``path``, shared with
    every other mapping of it; the file is created (and its memory reserved)
    when ``create``. Registered with CUDA when ``pin_device`` is a GPU."""
    numel = math.prod(int(size) for size in shape)
    nbytes = numel * dtype.itemsize
    if nbytes == 0:  # mmap cannot map nothing; an empty array needs no sharing
        return torch.empty(shape, dtype=dtype)
    flags = os.O_RDWR | (os.O_CREAT | os.O_EXCL if create else 0)
    fd = os.open(path, flags, 0o600)
    try:
        if create:
            try:
                if hasattr(os, "posix_fallocate"):
                    # reserve the pages now: writing past a full tmpfs through
                    # a mapping is a SIGBUS, this is an ENOSPC
                    os.posix_fallocate(fd, 0, nbytes)
                else:
                    os.ftruncate(fd, nbytes)
            except OSError as error:
                if error.errno == errno.ENOSPC:
                    free = os.statvfs(os.path.dirname(path))
                    raise NoRoom(f"{os.path.dirname(path)} has {size(free.f_bavail * free.f_frsize)} "
                                 f"free, {os.path.basename(path)} needs {size(nbytes)}") from error
                raise
        elif os.fstat(fd).st_size != nbytes:
            raise ValueError(f"{path} holds {os.fstat(fd).st_size} bytes, expected {nbytes} for "
                             f"{tuple(shape)} {dtype}")
        mapping = _Mapping(fd, nbytes, flags=mmap.MAP_SHARED, prot=mmap.PROT_READ | mmap.PROT_WRITE)
    finally:
        os.close(fd)  # the mapping keeps the file
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # frombuffer's "non-writable" warning cannot apply: it is writable
        tensor = torch.frombuffer(mapping, dtype=dtype, count=numel).view(shape)
    if pin_device is not None and pin_device.type == "cuda":
        mapping.pin(tensor.data_ptr(), nbytes, pin_device)
    return tensor


class NoRoom(OSError):
    """``/dev/shm`` cannot hold the host copy (its tmpfs is full or small:
    containers default to 64 MB)."""


def _host_key() -> str:
    """What ranks sharing a ``/dev/shm`` have in common and others do not:
    the kernel's boot id and the tmpfs's device number; a key no other
    process has when there is no ``/dev/shm``."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot}:{os.stat(SHM_DIR).st_dev}"
    except OSError:
        return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex}"


def _job_id() -> str:
    job = os.environ.get("TORCHELASTIC_RUN_ID") or os.environ.get("MASTER_PORT") or "job"
    return re.sub(r"[^A-Za-z0-9_.]", "_", job)[:32]


class HostGroup:
    """The ranks of the default process group that share this host's
    ``/dev/shm``.

    Attributes:
        rank: this process's rank.
        ranks: the ranks on this host, ascending; ``ranks[0]`` is the leader.
        token: a name part unique to this group's current use (rank 0's
            random token and the job id), the same on every rank.
        shared_anywhere: some host has more than one rank (the same on every
            rank, so every rank takes the same path through the collectives).
    """

    def __init__(self, rank: int, ranks: list[int], token: str, shared_anywhere: bool):
        self.rank, self.ranks, self.token, self.shared_anywhere = rank, ranks, token, shared_anywhere

    @property
    def leader(self) -> int:
        return self.ranks[0]

    @property
    def is_leader(self) -> bool:
        return self.rank == self.leader

    @classmethod
    def discover(cls) -> "HostGroup":
        """Every rank's host, gathered over the default process group (a
        collective: every rank must call it, in the same order)."""
        import torch.distributed as dist
        entries = [None] * dist.get_world_size()
        dist.all_gather_object(entries, (_host_key(), uuid.uuid4().hex[:16]))
        key = entries[dist.get_rank()][0]
        ranks = [r for r, (k, _) in enumerate(entries) if k == key]
        shared_anywhere = len({k for k, _ in entries}) < len(entries)
        return cls(dist.get_rank(), ranks, f"{_job_id()}-{entries[0][1]}", shared_anywhere)

    def path(self, name: str) -> str:
        """The ``/dev/shm`` path of array ``name`` of this group's leader."""
        return os.path.join(SHM_DIR, f"{_PREFIX}{self.token}-{self.leader}-{name}")

    def __repr__(self) -> str:
        return f"HostGroup(rank={self.rank}, ranks={self.ranks})"


class SharedHostArrays:
    """Arrays written once by a host's leader into ``/dev/shm`` and mapped by
    every rank of the host.

    Args:
        group: the ``HostGroup`` of this process.
        device: the device that reads the arrays: on a GPU they are pinned
            in place (``cudaHostRegister``) on every rank.

    Example:
        >>> group = HostGroup.discover()
        >>> def build(host):                       # runs on the leader only
        ...     host.copy("x", x)
        ...     return {"rows": x.size(0)}
        >>> meta, arrays = SharedHostArrays(group, device).publish(build, fingerprint=tuple(x.shape))
        >>> x_shared = arrays["x"]                  # the same pages on every rank of the host
    """

    def __init__(self, group: HostGroup, device: torch.device):
        self.group, self.device = group, torch.device(device)
        self._arrays: dict[str, torch.Tensor] = {}
        self._specs: dict[str, tuple] = {}
        self._paths: list[str] = []

    def empty(self, name: str, shape, dtype: torch.dtype, pin: bool = True) -> torch.Tensor:
        """A new shared array, to be written by the leader before ``publish``
        returns (leader only).

        Args:
            name: the array's name (a key of what ``publish`` returns).
            shape: its shape.
            dtype: its dtype.
            pin: register it with CUDA on a GPU (False for arrays the ranks
                only copy once).

        Returns:
            The array, in shared memory (contents undefined).
        """
        if not self.group.is_leader:
            raise RuntimeError(f"rank {self.group.rank} is not its host's leader (rank {self.group.leader}): "
                               f"only the leader writes the host copy")
        if name in self._arrays or not re.fullmatch(r"[A-Za-z0-9_]+", name):
            raise ValueError(f"name must be a new identifier, got {name!r}")
        path = self.group.path(name)
        self._paths.append(path)  # unlinked whatever happens next
        shape = tuple(int(s) for s in shape)
        tensor = _map(path, shape, dtype, create=True, pin_device=self.device if pin else None)
        self._arrays[name] = tensor
        self._specs[name] = (shape, str(dtype).removeprefix("torch."), pin)
        return tensor

    def copy(self, name: str, source: torch.Tensor, pin: bool = True) -> torch.Tensor:
        """``empty`` shaped like ``source``, filled with it (leader only)."""
        return self.empty(name, source.shape, source.dtype, pin).copy_(source)

    def publish(self, build, fingerprint) -> tuple[dict, dict[str, torch.Tensor]] | None:
        """Build the host copy on the leader, map it on every rank of the host.

        A collective: every rank of the process group calls it, in the same
        order (ranks of other hosts publish their own leader's copy).

        Args:
            build: called on the leader with this object; writes the arrays
                with ``empty``/``copy`` and returns a picklable dict of
                metadata for the other ranks.
            fingerprint: a picklable summary of this rank's input (sizes,
                dtypes); a rank whose fingerprint differs from its leader's
                raises, since it would read another graph than its own.

        Returns:
            ``(metadata, arrays)`` with ``arrays`` the published arrays by
            name, the same pages on every rank of the host; or None when
            ``/dev/shm`` had no room (a warning says so: each rank then keeps
            its own copy).

        Raises:
            The leader's exception, on the leader, or ``RuntimeError`` on the
            others, when building failed on some host; ``RuntimeError`` on
            every rank when a rank could not map its leader's files;
            ``ValueError`` when the fingerprints differ.
        """
        import torch.distributed as dist
        group = self.group
        error = outcome = None
        arrays: dict[str, torch.Tensor] = {}
        try:
            if group.is_leader:
                try:
                    meta = build(self)
                    outcome = ("ok", meta, dict(self._specs), fingerprint)
                except NoRoom as no_room:
                    outcome = ("no room", str(no_room))
                except Exception as failure:
                    error, outcome = failure, ("failed", f"{type(failure).__name__}: {failure}")
            outcomes = [None] * dist.get_world_size()
            dist.all_gather_object(outcomes, outcome)
            failed = [(r, o[1]) for r, o in enumerate(outcomes) if o is not None and o[0] == "failed"]
            if failed:
                if error is not None:
                    raise error
                rank, why = failed[0]
                raise RuntimeError(f"rank {rank} failed to build its host's shared copy of the graph: {why} "
                                   f"(share_host_memory=False builds a copy per rank)")
            mine = outcomes[group.leader]
            status = None
            if mine[0] == "ok":
                if mine[3] != fingerprint:
                    status = ("fingerprint", f"rank {group.rank} was given {fingerprint}, its host's leader "
                                             f"(rank {group.leader}) {mine[3]}")
                elif group.is_leader:
                    arrays = dict(self._arrays)
                else:
                    try:
                        for name, (shape, dtype, pin) in mine[2].items():
                            arrays[name] = _map(group.path(name), shape, getattr(torch, dtype), create=False,
                                                pin_device=self.device if pin else None)
                    except Exception as failure:
                        status = ("map", f"{type(failure).__name__}: {failure}")
            statuses = [None] * dist.get_world_size()
            dist.all_gather_object(statuses, status)  # every rank has mapped: the files can go
        finally:
            self._arrays.clear()
            for path in self._paths:
                try:
                    os.unlink(path)
                except FileNotFoundError:
                    pass
        bad = [(r, s) for r, s in enumerate(statuses) if s is not None]
        if bad:
            rank, (kind, why) = bad[0]
            if kind == "fingerprint":
                raise ValueError(f"every rank must pass the same data to share one host copy: {why}")
            raise RuntimeError(f"rank {rank} could not map its host's shared copy of the graph: {why}")
        if mine[0] == "no room":
            warnings.warn(f"NeighborLoader: no room in {SHM_DIR} for the host copy shared by ranks "
                          f"{group.ranks} ({mine[1]}): each rank keeps its own copy. Enlarge {SHM_DIR} "
                          f"(docker: --shm-size) or pass share_host_memory=False.", stacklevel=3)
            return None
        return mine[1], arrays
