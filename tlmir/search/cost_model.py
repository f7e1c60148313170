"""The learned cost model that ranks candidate programs before they are measured.

`CostModel` maps program feature vectors (see features.py) to a score, higher = faster.
It is a small MLP (two hidden ReLU layers) trained across tasks at once:

- targets are throughputs normalised within each task (divided by the task's best), so
  tasks of very different sizes share one scale (0 = failed / slowest, 1 = best);
- the loss is the squared error on that normalised throughput plus a pairwise ranking
  loss between programs of the same task (LambdaRank-lite: logistic loss on the score
  difference of a random same-task pair, weighted by their normalised-throughput gap);
- features are standardised with a mean / std stored in the model.

Training is seeded and reproducible, runs in torch on a bounded number of threads
(restored afterwards) and leaves torch's global random state untouched. Prediction is
plain numpy, so a saved model loads and predicts without torch. `save` / `load` use a
numpy .npz archive of plain arrays; loading never unpickles.
"""
from __future__ import annotations

import math
import os
import time

import numpy as np

from .. import errors
from ..runtime.files import atomic_write

FORMAT_VERSION = 1
_CLIP = 8.0  # standardised features are clipped to +-_CLIP (programs unlike the training set)


def _record_error(msg: str) -> errors.TlmirError:
    return getattr(errors, "RecordError", errors.TlmirError)(msg)


def normalized_throughput(throughputs: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Throughput / the best throughput of the same group; non-finite or <= 0 values
    (failed measurements) become 0."""
    t = np.asarray(throughputs, dtype=np.float64).copy()
    t[~np.isfinite(t) | (t < 0)] = 0.0
    g = np.asarray(groups)
    _, inv = np.unique(g, return_inverse=True)
    best = np.zeros(inv.max() + 1 if len(inv) else 0)
    np.maximum.at(best, inv, t)
    denom = best[inv]
    return np.divide(t, denom, out=np.zeros_like(t), where=denom > 0)


class CostModel:
    """Score programs from their feature vectors; higher = faster.

    fit(features [n, d], throughputs [n], groups [n]) retrains from scratch (seeded);
    predict(features [m, d]) -> float64 scores [m]. Before any successful fit predict
    returns zeros (every candidate ties). A fit on fewer than two samples is a no-op.

    Training costs `steps` mini-batches of `batch_size` programs (plus as many same-task
    partners) whatever n is: about 1 s on one core. `num_threads` (default 1) bounds
    torch's threads during fit; for a net this small more threads only add
    synchronisation, and on a busy 2-core machine 2 threads ran 25x slower than 1."""

    def __init__(self, hidden: tuple[int, int] = (128, 64), steps: int = 600, batch_size: int = 256,
                 lr: float = 2e-3, weight_decay: float = 1e-4, rank_weight: float = 3.0,
                 seed: int = 0, num_threads: int = 1):
        self.hidden = tuple(int(h) for h in hidden)
        if len(self.hidden) != 2 or min(self.hidden) < 1:
            raise errors.TlmirError(f"CostModel: hidden must be two positive widths, got {hidden!r}")
        self.steps, self.batch_size = int(steps), int(batch_size)
        if self.steps < 1 or self.batch_size < 1:
            raise errors.TlmirError(f"CostModel: steps and batch_size must be >= 1, got {steps}, {batch_size}")
        self.lr, self.weight_decay, self.rank_weight = float(lr), float(weight_decay), float(rank_weight)
        self.seed, self.num_threads = int(seed), int(num_threads)
        self.mean: np.ndarray | None = None
        self.std: np.ndarray | None = None
        self.params: list[np.ndarray] | None = None   # W1, b1, W2, b2, W3, b3 (float32)
        self.n_features: int | None = None
        self.n_trained = 0
        self.last_fit_seconds = 0.0

    @property
    def fitted(self) -> bool:
        return self.params is not None

    # ------------------------------------------------------------------ training
    def fit(self, features, throughputs, groups) -> "CostModel":
        X = np.asarray(features, dtype=np.float64)
        if X.ndim != 2:
            raise errors.TlmirError(f"CostModel.fit: features must be 2-D [n, d], got shape {X.shape}")
        n, d = X.shape
        thr = np.asarray(throughputs, dtype=np.float64).reshape(-1)
        grp = np.asarray(groups).reshape(-1)
        if len(thr) != n or len(grp) != n:
            raise errors.TlmirError(f"CostModel.fit: {n} feature rows but {len(thr)} throughputs "
                                    f"and {len(grp)} groups")
        if n < 2:
            return self   # nothing to learn from; keep the previous model (or none)
        X = np.nan_to_num(X, nan=0.0, posinf=0.0, neginf=0.0)
        y = normalized_throughput(thr, grp)
        mean = X.mean(axis=0)
        std = X.std(axis=0)
        std[std < 1e-6] = 1.0
        Z = np.clip((X - mean) / std, -_CLIP, _CLIP).astype(np.float32)
        t0 = time.perf_counter()
        params = self._train(Z, y.astype(np.float32), np.unique(grp, return_inverse=True)[1])
        self.last_fit_seconds = time.perf_counter() - t0
        self.mean, self.std = mean, std
        self.params, self.n_features, self.n_trained = params, d, n
        return self

    def _train(self, Z: np.ndarray, y: np.ndarray, gid: np.ndarray) -> list[np.ndarray]:
        import torch

        n, d = Z.shape
        rng = np.random.default_rng(self.seed)
        bs = min(self.batch_size, n)
        steps = self.steps
        # batches and same-group partners for every step, drawn up front
        order = np.argsort(gid, kind="stable")
        sizes = np.bincount(gid)
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        idx = rng.integers(0, n, size=(steps, bs))
        g = gid[idx]
        partner = order[starts[g] + (rng.random((steps, bs)) * sizes[g]).astype(np.int64)]
        pairs = np.concatenate([idx, partner], axis=1)

        old_threads = torch.get_num_threads()
        try:
            torch.set_num_threads(max(1, min(self.num_threads, old_threads)))
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(self.seed)
                h1, h2 = self.hidden
                net = torch.nn.Sequential(
                    torch.nn.Linear(d, h1), torch.nn.ReLU(),
                    torch.nn.Linear(h1, h2), torch.nn.ReLU(),
                    torch.nn.Linear(h2, 1))
                opt = torch.optim.AdamW(net.parameters(), lr=self.lr, weight_decay=self.weight_decay)
                warm = max(1, steps // 10)
                # linear warm-up, then cosine decay to zero
                lrs = [self.lr * min(1.0, (k + 1) / warm) * 0.5 * (1.0 + math.cos(math.pi * k / steps))
                       for k in range(steps)]
                Zt, yt = torch.from_numpy(Z), torch.from_numpy(y)
                pt = torch.from_numpy(pairs)
                for step in range(steps):
                    for group in opt.param_groups:
                        group["lr"] = lrs[step]
                    b = pt[step]
                    s = net(Zt[b]).squeeze(1)
                    yb = yt[b]
                    si, sj = s[:bs], s[bs:]
                    yi, yj = yb[:bs], yb[bs:]
                    mse = torch.mean((si - yi) ** 2)
                    w = (yi - yj).abs()
                    sign = torch.sign(yi - yj)
                    rank = (w * torch.nn.functional.softplus(-sign * (si - sj))).sum() / w.sum().clamp_min(1e-6)
                    loss = mse + self.rank_weight * rank
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()
                return [p.detach().numpy().astype(np.float32).T.copy() if p.ndim == 2
                        else p.detach().numpy().astype(np.float32).copy() for p in net.parameters()]
        finally:
            torch.set_num_threads(old_threads)

    # ------------------------------------------------------------------ scoring
    def predict(self, features) -> np.ndarray:
        X = np.asarray(features, dtype=np.float32)
        if X.ndim == 1:
            X = X[None, :]
        if X.ndim != 2:
            raise errors.TlmirError(f"CostModel.predict: features must be 2-D [n, d], got shape {X.shape}")
        if not self.fitted:
            return np.zeros(len(X))
        if X.shape[1] != self.n_features:
            raise errors.TlmirError(f"CostModel.predict: the model was trained on {self.n_features} "
                                    f"features, got {X.shape[1]}")
        if not np.isfinite(X).all():
            X = np.nan_to_num(X, nan=0.0, posinf=0.0, neginf=0.0)
        h = (X - self.mean.astype(np.float32)) / self.std.astype(np.float32)
        np.clip(h, -_CLIP, _CLIP, out=h)
        W1, b1, W2, b2, W3, b3 = self.params
        h = h @ W1
        h += b1
        np.maximum(h, 0.0, out=h)
        h = h @ W2
        h += b2
        np.maximum(h, 0.0, out=h)
        return (h @ W3 + b3)[:, 0].astype(np.float64)

    # ------------------------------------------------------------------ persistence
    _CONFIG = ("steps", "batch_size", "lr", "weight_decay", "rank_weight", "seed", "num_threads")

    def save(self, path) -> None:
        """Write the model to `path` (a numpy .npz archive of plain arrays), atomically."""
        arrays = {
            "format_version": np.array(FORMAT_VERSION, dtype=np.int64),
            "hidden": np.array(self.hidden, dtype=np.int64),
            "config": np.array([float(getattr(self, k)) for k in self._CONFIG], dtype=np.float64),
            "fitted": np.array(int(self.fitted), dtype=np.int64),
            "n_trained": np.array(self.n_trained, dtype=np.int64),
        }
        if self.fitted:
            arrays["mean"], arrays["std"] = self.mean, self.std
            for k, p in enumerate(self.params):
                arrays[f"p{k}"] = p
        def write(tmp: str) -> None:
            with open(tmp, "wb") as fh:  # a file object: savez would append .npz to a name
                np.savez(fh, **arrays)
        atomic_write(os.fspath(path), write)

    @classmethod
    def load(cls, path) -> "CostModel":
        """Read a model written by `save`. A missing, truncated or inconsistent file raises
        RecordError (TlmirError where tlmir has no RecordError) naming the file."""
        path = os.fspath(path)
        try:
            with np.load(path, allow_pickle=False) as z:
                a = {k: z[k] for k in z.files}
        except FileNotFoundError:
            raise _record_error(f"cost model file {path!r} does not exist") from None
        except Exception as e:  # noqa: BLE001 - anything unreadable is a corrupt record
            raise _record_error(f"cost model file {path!r} is corrupt or not a cost model "
                                f"({type(e).__name__}: {e})") from None
        try:
            return cls._from_arrays(a)
        except Exception as e:  # noqa: BLE001
            raise _record_error(f"cost model file {path!r} is corrupt or not a cost model: {e}") from None

    @classmethod
    def _from_arrays(cls, a: dict) -> "CostModel":
        for k in ("format_version", "hidden", "config", "fitted", "n_trained"):
            if k not in a:
                raise ValueError(f"missing entry {k!r}")
        if int(a["format_version"]) != FORMAT_VERSION:
            raise ValueError(f"format version {int(a['format_version'])}, expected {FORMAT_VERSION}")
        cfg = a["config"]
        if cfg.shape != (len(cls._CONFIG),) or a["hidden"].shape != (2,):
            raise ValueError("bad config / hidden shapes")
        kw = {k: v for k, v in zip(cls._CONFIG, cfg.tolist())}
        for k in ("steps", "batch_size", "seed", "num_threads"):
            kw[k] = int(kw[k])
        m = cls(hidden=tuple(int(h) for h in a["hidden"]), **kw)
        m.n_trained = int(a["n_trained"])
        if int(a["fitted"]):
            mean, std = a["mean"], a["std"]
            params = [a[f"p{k}"] for k in range(6)]
            d = mean.shape[0] if mean.ndim == 1 else -1
            h1, h2 = m.hidden
            want = [(d, h1), (h1,), (h1, h2), (h2,), (h2, 1), (1,)]
            if d < 1 or std.shape != (d,) or [p.shape for p in params] != want:
                raise ValueError("parameter shapes do not fit together")
            for x in [mean, std] + params:
                if x.dtype.kind != "f" or not np.isfinite(x).all():
                    raise ValueError("non-finite or non-float parameters")
            if (std <= 0).any():
                raise ValueError("non-positive feature scale")
            m.mean, m.std = mean.astype(np.float64), std.astype(np.float64)
            m.params = [p.astype(np.float32) for p in params]
            m.n_features = d
        return m
