"""Elastic resume: where a rank is in DistributedSampler's list of an
epoch, and whether a mount of another world size goes on from there
(fs/README.md: elastic resume).

DistributedSampler's epoch is one list (the epoch's permutation, padded
to a multiple of the world size W, or cut to one under the sampler's
drop_last); rank r reads positions r, r + W, ... of it, B at a time. When
every rank has read K batches, the ranks have read its first W x K x B
positions: the state records that count, "samples_seen", so that a job
restarted on W' ranks mounts `--world-size W' --resume-at E:S:W` and reads
the rest of the epoch exactly once."""
import shlex


def _whole(samples, world, sampler_drop_last):
    """The positions of DistributedSampler's padded (or cut) list."""
    if sampler_drop_last and samples % world:
        per = (samples - world) // world + ((samples - world) % world != 0) \
            if samples >= world else 0
    else:
        per = -(-samples // world)
    return per * world


class Elastic:
    """A mount's view of elastic resume, from its dataset.json."""

    def __init__(self, info, mountpoint):
        self.mountpoint = mountpoint
        self.distributed = info.get("sampler") == "distributed"
        self.world = info.get("world_size", 1)
        self.batch_size = info["batch_size"]
        self.samples = info["samples"]
        self.sampler_drop_last = bool(info.get("sampler_drop_last"))
        self.resume = info.get("resume")
        self.len = info["batches_per_epoch"]
        self._sources = info.get("sources", [])
        self._options = info.get("options", "")

    def resume_arg(self):
        """The mount's --resume-at E:S:W, or None."""
        r = self.resume
        return None if not r else "%d:%d:%d" % (r["epoch"], r["position"],
                                                r["world_size"])

    def resumed(self, epoch):
        return bool(self.resume) and epoch == self.resume["epoch"]

    def len_of(self, epoch):
        """Batches of 'epoch': fewer in the epoch a resume starts in."""
        return self.resume["batches"] if self.resumed(epoch) else self.len

    def position(self, epoch, k):
        """What state_dict() adds for batch k of 'epoch' next: the samples
        of the epoch's list every rank has read, and whose list."""
        read = self.world * k * self.batch_size
        if self.resumed(epoch):
            r = self.resume
            seen, world = r["position"] + min(read, r["samples_left"]), \
                r["world_size"]
        else:
            seen = min(read, _whole(self.samples, self.world,
                                    self.sampler_drop_last))
            world = self.world
        return {"samples_seen": seen, "list_world_size": world,
                "world_size": self.world, "resume_at": self.resume_arg()}

    def start_of(self, state, epoch, k):
        """Where this mount goes on from a state_dict() saved on a mount
        of another world size (or another resume): (epoch, batch), or a
        ValueError that gives the mount command that goes on from it."""
        if not self.distributed or "samples_seen" not in state:
            return epoch, k
        there = state.get("resume_at")
        there_resumed = bool(there) and int(there.split(":")[0]) == epoch
        if state["world_size"] == self.world and \
                there_resumed == self.resumed(epoch) and \
                (not there_resumed or there == self.resume_arg()):
            return epoch, k                 # the same list: the same batch
        seen, world = int(state["samples_seen"]), \
            int(state["list_world_size"])
        want = "%d:%d:%d" % (epoch, seen, world)
        if self.resume_arg() == want:
            return epoch, 0
        if seen == 0 and not there_resumed and not self.resumed(epoch) and \
                not self.sampler_drop_last:
            return epoch, 0                 # an epoch's start: any W's
        raise ValueError(
            "the state was saved at epoch %d after %d samples of its list "
            "on %d ranks (batch %d of %d ranks); this mount serves %d ranks "
            "%s: to go on with every sample of the epoch read once, mount "
            "with --resume-at %s:\n  %s"
            % (epoch, seen, world, k, state["world_size"], self.world,
               "resuming " + self.resume_arg() if self.resume
               else "from the epoch's start", want, self.command(want)))

    def command(self, resume_at):
        """The mount command of this mount's sources and options with
        --resume-at resume_at (remote sources as dataset.json shows them:
        without query or userinfo)."""
        opts = shlex.split(self._options)
        out, skip = [], False
        for o in opts:
            if skip:
                skip = False
            elif o == "--resume-at":
                skip = True
            else:
                out.append(o)
        return " ".join(["batchfs", "mount"] +
                        [shlex.quote(s) for s in self._sources] +
                        [shlex.quote(self.mountpoint)] +
                        [shlex.quote(o) for o in out] +
                        ["--resume-at", resume_at])


def resume_state(states):
    """The state every rank reached, from each rank's state_dict() (ranks
    that got unequally far: the fewest samples of the earliest epoch). The
    batches other ranks read past it are read again after the restart:
    a resume repeats them rather than lose any."""
    states = list(states)
    if not states:
        raise ValueError("resume_state: no states (one per rank)")
    return min(states, key=lambda s: (int(s["epoch"]),
                                      int(s.get("samples_seen", 0))))
