"""batchfs.IterableDataset: a mount as a torch IterableDataset of whole
batches, for DataLoader(ds, batch_size=None) and what builds on it
(Lightning, HF Trainer, Accelerate)."""
import torch

from ._batches import Batches


class _WorkerShare(Batches):
    """The batches of one DataLoader worker: every num_workers-th, from
    its id. DataLoader takes one from each worker in turn, so the order
    is the epoch's."""

    def __init__(self, parent, worker, workers):
        self.__dict__.update(parent.__dict__)
        self._worker, self._workers = worker, workers

    def _indices(self, k):
        first = k + (self._worker - k) % self._workers
        return range(first, self._len, self._workers)


class IterableDataset(torch.utils.data.IterableDataset):
    """The batches of a batchfs mount, each a dict name -> tensor:
    DataLoader(IterableDataset(mnt), batch_size=None) yields exactly
    PyTorch's batches for the mounted options, epoch after epoch.

    Batches are CPU tensors (device="cpu"; pin_memory=True in DataLoader
    for fast copies to a GPU). epoch / start_batch / zero_copy /
    set_epoch() / state_dict() / load_state_dict() are batchfs.Batches'. With num_workers > 0 each
    worker reads every num_workers-th batch (the order stays the epoch's);
    the workers are copies, so call set_epoch(n) before each epoch, and
    keep device="cpu" (no CUDA in workers)."""

    def __init__(self, mountpoint, epoch=0, start_batch=0, device="cpu",
                 zero_copy=False):
        super().__init__()
        self.batches = Batches(mountpoint, epoch, start_batch, device,
                               zero_copy)

    def __len__(self):
        return len(self.batches)

    def __iter__(self):
        info = torch.utils.data.get_worker_info()
        if info is None or info.num_workers == 1:
            return iter(self.batches)
        return iter(_WorkerShare(self.batches, info.id, info.num_workers))

    def set_epoch(self, epoch):
        self.batches.set_epoch(epoch)

    def state_dict(self):
        return self.batches.state_dict()

    def load_state_dict(self, state):
        self.batches.load_state_dict(state)
