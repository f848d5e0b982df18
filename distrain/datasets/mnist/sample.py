"""A learnable sample in MNIST's exact format, for machines that cannot download MNIST.

Each digit is a set of pen strokes (lines and arcs in a unit box). Every sample draws its
own variant: jittered stroke points, rotation, scale, shear, shift, pen width, soft
anti-aliased edges, noise and the odd speck. Images are 28x28 uint8 (0 background, 255
ink) centred like MNIST's (the digit inside the central 20x20 box); labels are 0-9,
balanced and shuffled. The same seed gives the same bytes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from distrain.datasets.mnist.idx import MNIST_FILES, write_idx

# Strokes in a unit box (x to the right, y down). ("line", [(x, y), ...]) is a polyline;
# ("arc", (cx, cy, rx, ry, from_deg, to_deg)) an elliptic arc, angles measured with y
# down (90 degrees points down).
_STROKES: dict[int, list[tuple]] = {
    0: [("arc", (0.5, 0.5, 0.28, 0.42, 0, 360))],
    1: [("line", [(0.36, 0.24), (0.52, 0.08), (0.52, 0.92)])],
    2: [
        ("arc", (0.5, 0.31, 0.24, 0.22, 190, 395)),
        ("line", [(0.68, 0.45), (0.24, 0.9), (0.8, 0.9)]),
    ],
    3: [
        ("arc", (0.48, 0.29, 0.22, 0.2, 200, 450)),
        ("arc", (0.48, 0.69, 0.25, 0.21, -90, 165)),
    ],
    4: [("line", [(0.64, 0.92), (0.64, 0.08), (0.18, 0.64), (0.84, 0.64)])],
    5: [
        ("line", [(0.76, 0.1), (0.34, 0.1), (0.3, 0.46)]),
        ("arc", (0.49, 0.66, 0.26, 0.24, -125, 150)),
    ],
    6: [
        ("line", [(0.7, 0.08), (0.46, 0.26), (0.32, 0.5), (0.31, 0.68)]),
        ("arc", (0.5, 0.7, 0.2, 0.2, 0, 360)),
    ],
    7: [("line", [(0.18, 0.1), (0.82, 0.1), (0.42, 0.92)])],
    8: [
        ("arc", (0.5, 0.28, 0.18, 0.19, 0, 360)),
        ("arc", (0.5, 0.7, 0.23, 0.22, 0, 360)),
    ],
    9: [
        ("arc", (0.5, 0.32, 0.2, 0.21, 0, 360)),
        ("line", [(0.7, 0.34), (0.64, 0.92)]),
    ],
}


@dataclass(frozen=True)
class MnistSampleConfig:
    """Size and look of a generated sample.

    Attributes:
        train_size: Training images.
        test_size: Test images (drawn with a different seed).
        seed: Seed of the whole sample.
        image_size: Side of the square images (MNIST: 28).
        jitter: Random displacement of stroke points, in units of the digit box.
        max_rotation: Largest rotation, in degrees.
        noise: Standard deviation of the pixel noise (0-1 scale).
        speck_probability: Chance that an image gets a stray speck of ink.
    """

    train_size: int = 10000
    test_size: int = 2000
    seed: int = 0
    image_size: int = 28
    jitter: float = 0.05
    max_rotation: float = 14.0
    noise: float = 0.06
    speck_probability: float = 0.15

    def __post_init__(self) -> None:
        if self.train_size < 1 or self.test_size < 1:
            raise ValueError(
                f"sample sizes must be positive, got train {self.train_size}, test {self.test_size}"
            )
        if self.image_size < 8:
            raise ValueError(f"image_size must be at least 8, got {self.image_size}")
        if not 0 <= self.speck_probability <= 1:
            raise ValueError("speck_probability must be within [0, 1]")
        if self.jitter < 0 or self.noise < 0 or self.max_rotation < 0:
            raise ValueError("jitter, noise and max_rotation must not be negative")


def _stroke_points(digit: int, rng: np.random.Generator, jitter: float) -> list[np.ndarray]:
    """The polylines of one drawing of ``digit``, jittered, as arrays of points."""
    lines = []
    for kind, spec in _STROKES[digit]:
        if kind == "line":
            pts = np.asarray(spec, dtype=np.float64)
            pts = pts + rng.normal(0.0, jitter, pts.shape)
        else:
            cx, cy, rx, ry, a0, a1 = spec
            cx, cy = cx + rng.normal(0, jitter * 0.6), cy + rng.normal(0, jitter * 0.6)
            rx *= 1 + rng.normal(0, 0.12)
            ry *= 1 + rng.normal(0, 0.12)
            a0 += rng.normal(0, 8)
            a1 += rng.normal(0, 8)
            angles = np.radians(np.linspace(a0, a1, max(5, int(abs(a1 - a0) / 24))))
            pts = np.stack([cx + rx * np.cos(angles), cy + ry * np.sin(angles)], axis=1)
            # A wobble along the arc, as a hand would draw it.
            pts = pts + rng.normal(0.0, jitter * 0.25, pts.shape)
        lines.append(pts)
    return lines


def _segments(lines: list[np.ndarray]) -> np.ndarray:
    return np.concatenate([np.stack([p[:-1], p[1:]], axis=1) for p in lines], axis=0)


def _affine(rng: np.random.Generator, cfg: MnistSampleConfig) -> np.ndarray:
    """A random 2x3 map from the unit box to pixel coordinates."""
    size = cfg.image_size
    box = size * 20 / 28
    angle = np.radians(rng.uniform(-cfg.max_rotation, cfg.max_rotation))
    scale = rng.uniform(0.8, 1.08)
    aspect = rng.uniform(0.8, 1.1)
    shear = rng.uniform(-0.25, 0.25)
    rot = np.array([[np.cos(angle), -np.sin(angle)], [np.sin(angle), np.cos(angle)]])
    lin = rot @ np.array([[scale * aspect, shear], [0.0, scale]]) * box
    shift = rng.uniform(-2.0, 2.0, 2) * size / 28
    centre = np.array([size / 2, size / 2]) + shift
    offset = centre - lin @ np.array([0.5, 0.5])
    return np.concatenate([lin, offset[:, None]], axis=1)


def _render(segments: np.ndarray, weights: np.ndarray, widths: np.ndarray, size: int):
    """Anti-aliased ink of a batch of drawings.

    Args:
        segments: ``[B, S, 2, 2]`` segment end points in pixel coordinates.
        weights: ``[B, S]`` ink of each segment (0 for padding).
        widths: ``[B]`` pen width of each drawing, in pixels.
        size: Image side.

    Returns:
        ``[B, size, size]`` ink in [0, 1].
    """
    ys, xs = np.mgrid[0:size, 0:size].astype(np.float32) + 0.5
    px, py = xs.ravel()[None, :, None], ys.ravel()[None, :, None]  # (1, P, 1)
    seg = segments.astype(np.float32)
    ax, ay = seg[:, None, :, 0, 0], seg[:, None, :, 0, 1]  # (B, 1, S)
    dx, dy = seg[:, None, :, 1, 0] - ax, seg[:, None, :, 1, 1] - ay
    inv = 1.0 / np.maximum(dx * dx + dy * dy, 1e-6)
    apx, apy = px - ax, py - ay  # (B, P, S)
    t = np.clip((apx * dx + apy * dy) * inv, 0.0, 1.0)
    ox, oy = apx - t * dx, apy - t * dy
    dist = np.sqrt(ox * ox + oy * oy)
    half = widths.astype(np.float32)[:, None, None] / 2 + 0.6
    ink = np.clip((half - dist) / 1.2, 0.0, 1.0) * weights.astype(np.float32)[:, None, :]
    return ink.max(axis=2).reshape(-1, size, size)


def generate_digits(
    n: int, seed: int, config: MnistSampleConfig | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """Draws ``n`` labelled digit images.

    Args:
        n: Number of images.
        seed: Seed; the same seed and config give the same arrays.
        config: Look of the digits (sizes in it are ignored here).

    Returns:
        ``(images, labels)``: uint8 ``[n, size, size]`` (0 background, 255 ink) and uint8
        ``[n]`` labels, balanced over 0-9 and shuffled.
    """
    cfg = config or MnistSampleConfig()
    rng = np.random.default_rng(seed)
    labels = rng.permutation(np.arange(n) % 10).astype(np.uint8)
    size = cfg.image_size
    drawings, widths = [], np.empty(n)
    for i, digit in enumerate(labels):
        m = _affine(rng, cfg)
        segs = _segments(_stroke_points(int(digit), rng, cfg.jitter)) @ m[:, :2].T + m[:, 2]
        weights = np.full(len(segs), rng.uniform(0.75, 1.0))
        if rng.random() < cfg.speck_probability:
            start = rng.uniform(1, size - 1, 2)
            speck = np.stack([start, start + rng.normal(0, 1.5, 2)])[None]
            segs = np.concatenate([segs, speck])
            weights = np.append(weights, 0.7)
        drawings.append((segs, weights))
        widths[i] = rng.uniform(1.3, 2.8) * size / 28
    images = np.empty((n, size, size), dtype=np.uint8)
    chunk = 64
    for lo in range(0, n, chunk):
        batch = drawings[lo : lo + chunk]
        width = max(len(w) for _, w in batch)
        segs = np.zeros((len(batch), width, 2, 2))
        weights = np.zeros((len(batch), width))
        for j, (s, w) in enumerate(batch):
            segs[j, : len(s)], weights[j, : len(w)] = s, w
        ink = _render(segs, weights, widths[lo : lo + chunk], size)
        noise = rng.normal(0.0, cfg.noise, ink.shape) * (rng.random(ink.shape) < 0.5)
        images[lo : lo + chunk] = np.clip((ink + noise) * 255.0, 0, 255).astype(np.uint8)
    return images, labels


def write_mnist_sample(
    output_dir: str | os.PathLike, config: MnistSampleConfig | None = None
) -> dict:
    """Writes a sample as the four gzipped IDX files of the MNIST distribution.

    Args:
        output_dir: Destination directory (created if missing).
        config: Sizes, seed and look.

    Returns:
        ``{"files": {split: [images, labels]}, "counts": {split: n}}``.
    """
    cfg = config or MnistSampleConfig()
    out = Path(output_dir)
    out.mkdir(parents=True, exist_ok=True)
    train_seed, test_seed = np.random.SeedSequence(cfg.seed).spawn(2)
    seeds = {
        "train": int(train_seed.generate_state(1)[0]),
        "test": int(test_seed.generate_state(1)[0]),
    }
    sizes = {"train": cfg.train_size, "test": cfg.test_size}
    summary: dict = {"files": {}, "counts": {}}
    for split, (images_name, labels_name) in MNIST_FILES.items():
        images, labels = generate_digits(sizes[split], seeds[split], cfg)
        write_idx(out / images_name, images)
        write_idx(out / labels_name, labels)
        summary["files"][split] = [str(out / images_name), str(out / labels_name)]
        summary["counts"][split] = sizes[split]
    return summary
