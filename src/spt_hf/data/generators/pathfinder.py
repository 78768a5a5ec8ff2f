"""Pathfinder / PathX generator (Linsley et al. 2018; docs/data.md §3), our own numpy + PIL implementation.

A *paddle* is a short bar; a *snake* is a chain of paddles, each next paddle on a circle around a pivot just
beyond the tip of the previous one, its direction turned by an angle drawn with weight
cos²(min(|turn|·continuity, π/2)) among candidate turns whose paddle lands on free canvas (away from every
other paddle by the margin, inside the border). Two target snakes start ``seed_distance`` apart and grow in
lockstep; short distractor snakes fill the canvas. The label is drawn 50/50: one marker disc on the first
target's start, the other on the same snake's end (connected, label 1) or on the other snake's end (label 0).
Drawing happens at ``supersample``x and is box-downsampled, which antialiases the thin paddles.
"""

from __future__ import annotations

import json
import math
import multiprocessing
from collections.abc import Callable
from dataclasses import dataclass, fields, replace
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw

# LRA parameters at 32 and 128 px (docs/data.md §3). 64 and 256 px are ours: in between, and beyond with about the
# same density of distractor paddles per area as at 128 px.
PRESETS: dict[int, dict[str, float]] = {
    32: dict(
        paddle_length=2.0,
        paddle_thickness=0.5,
        paddle_margin=1.0,
        marker_radius=1.5,
        seed_distance=7.0,
        continuity=1.0,
        distractor_paddles=20.0,
    ),
    64: dict(
        paddle_length=3.0,
        paddle_thickness=1.0,
        paddle_margin=2.0,
        marker_radius=2.0,
        seed_distance=12.0,
        continuity=1.4,
        distractor_paddles=28.0,
    ),
    128: dict(
        paddle_length=5.0,
        paddle_thickness=1.5,
        paddle_margin=3.0,
        marker_radius=3.0,
        seed_distance=20.0,
        continuity=1.8,
        distractor_paddles=35.0,
    ),
    256: dict(
        paddle_length=9.0,
        paddle_thickness=2.5,
        paddle_margin=5.0,
        marker_radius=5.0,
        seed_distance=36.0,
        continuity=1.8,
        distractor_paddles=70.0,
    ),
}


class PlacementError(RuntimeError):
    """The target snakes could not be placed (the canvas is too crowded for the parameters)."""


@dataclass(frozen=True)
class PathfinderParams:
    """Generator parameters; :meth:`for_resolution` gives LRA's values for a canvas size.

    Args:
        resolution: canvas side in pixels (32 Pathfinder, 128 PathX, 256 PathX-256; any size works).
        contour_length: paddles per target snake (LRA: 14; 9 and 6 are the easier levels).
        paddle_length, paddle_thickness: paddle size in pixels.
        paddle_margin: gap between successive paddles and minimum clearance to other paddles, in pixels.
        marker_radius: radius of the two marker discs.
        seed_distance: distance between the starts of the two target snakes.
        continuity: turn penalty; turns beyond π/(2·continuity) are never drawn.
        distractor_paddles: about this many paddles go into distractors of length ``contour_length // 3``.
        supersample: drawing scale before downsampling.
        num_candidates: candidate turns tried per paddle.
    """

    resolution: int = 32
    contour_length: int = 14
    paddle_length: float = 2.0
    paddle_thickness: float = 0.5
    paddle_margin: float = 1.0
    marker_radius: float = 1.5
    seed_distance: float = 7.0
    continuity: float = 1.0
    distractor_paddles: float = 20.0
    supersample: int = 4
    num_candidates: int = 16

    @classmethod
    def for_resolution(cls, resolution: int, **overrides: float) -> PathfinderParams:
        """LRA's parameters at ``resolution`` (interpolated in log-size between presets), then ``overrides``."""
        keys = sorted(PRESETS)
        lo = max([k for k in keys if k <= resolution], default=keys[0])
        hi = min([k for k in keys if k >= resolution], default=keys[-1])
        t = 0.0 if lo == hi else (math.log(resolution) - math.log(lo)) / (math.log(hi) - math.log(lo))
        scale = resolution / lo if resolution < keys[0] or resolution > keys[-1] else 1.0
        values = {k: ((1 - t) * PRESETS[lo][k] + t * PRESETS[hi][k]) for k in PRESETS[lo]}
        values = {k: v if k in ("continuity", "distractor_paddles") else v * scale for k, v in values.items()}
        unknown = set(overrides) - {f.name for f in fields(cls)}
        if unknown:
            raise TypeError(f"unknown Pathfinder parameters {sorted(unknown)}")
        return replace(cls(resolution=resolution, **values), **overrides)

    @property
    def level_folder(self) -> str:
        """LRA's folder name for this contour length."""
        return "curv_baseline" if self.contour_length == 6 else f"curv_contour_length_{self.contour_length}"


class _Canvas:
    """Occupancy counts on a 2x-resolution grid; each placed paddle marks the cells within its clearance."""

    def __init__(self, p: PathfinderParams) -> None:
        self.p, self.g = p, 2.0  # grid cells per pixel
        n = int(p.resolution * self.g)
        self.occ = np.zeros((n, n), dtype=np.int16)  # (H, W) counts
        self.reach = p.paddle_thickness + p.paddle_margin  # centre-line clearance between two paddles
        self.t_points = np.linspace(0.0, 1.0, max(3, math.ceil(p.paddle_length * self.g) + 1))  # (P,)

    def mark(self, a: np.ndarray, b: np.ndarray, radius: float, delta: int = 1) -> np.ndarray:
        """Add ``delta`` to cells within ``radius`` px of segment a-b; returns their flat indices."""
        n, g = self.occ.shape[0], self.g
        (ax, ay), (bx, by) = a.tolist(), b.tolist()
        x0, x1 = max(0, int((min(ax, bx) - radius) * g)), min(n - 1, int((max(ax, bx) + radius) * g) + 1)
        y0, y1 = max(0, int((min(ay, by) - radius) * g)), min(n - 1, int((max(ay, by) + radius) * g) + 1)
        xs, ys = np.arange(x0, x1 + 1), np.arange(y0, y1 + 1)  # (w,), (h,) cell indices
        px, py = (xs + 0.5) / g - ax, ((ys + 0.5) / g - ay)[:, None]  # (w,), (h, 1) centres relative to a
        dx, dy = bx - ax, by - ay
        t = np.clip((px * dx + py * dy) / max(dx * dx + dy * dy, 1e-9), 0.0, 1.0)  # (h, w) projection
        near = (px - t * dx) ** 2 + (py - t * dy) ** 2 <= radius * radius  # (h, w)
        rows, cols = np.nonzero(near)
        flat = (rows + y0) * n + (cols + x0)
        self.occ.ravel()[flat] += delta
        return flat

    def free(self, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
        """Which candidate paddles (K, 2)->(K, 2) lie inside the border and on unoccupied cells; (K,) bool."""
        pts = starts[:, None] + self.t_points[None, :, None] * (ends - starts)[:, None]  # (K, P, 2)
        border = self.p.paddle_thickness
        inside = ((pts >= border) & (pts <= self.p.resolution - border)).all(axis=(1, 2))  # (K,)
        cells = np.clip((pts * self.g).astype(int), 0, self.occ.shape[0] - 1)  # (K, P, 2)
        hit = self.occ[cells[..., 1], cells[..., 0]].any(axis=1)  # (K,)
        return inside & ~hit


class _Snake:
    """A chain of paddles (start and end points) growing from one end."""

    def __init__(self, canvas: _Canvas, a: np.ndarray, b: np.ndarray) -> None:
        self.canvas, self.paddles = canvas, [(a, b)]
        self.last_cells = canvas.mark(a, b, canvas.reach)

    def grow(self, rng: np.random.Generator) -> bool:
        """Add one paddle; False when no candidate direction is free."""
        c, p = self.canvas, self.canvas.p
        a, b = self.paddles[-1]
        heading = math.atan2(b[1] - a[1], b[0] - a[0])
        max_turn = math.pi / (2 * p.continuity)
        turns = rng.uniform(-max_turn, max_turn, p.num_candidates)  # (K,)
        weights = np.cos(np.minimum(np.abs(turns) * p.continuity, math.pi / 2)) ** 2  # (K,)
        pivot = b + 0.5 * p.paddle_margin * np.array([math.cos(heading), math.sin(heading)])
        dirs = np.stack([np.cos(heading + turns), np.sin(heading + turns)], -1)  # (K, 2)
        starts = pivot + 0.5 * p.paddle_margin * dirs  # (K, 2): on a circle around the pivot
        ends = starts + p.paddle_length * dirs  # (K, 2)
        c.occ.ravel()[self.last_cells] -= 1  # a paddle may touch its own predecessor
        ok = c.free(starts, ends)
        c.occ.ravel()[self.last_cells] += 1
        weights = weights * ok
        if weights.sum() <= 0:
            return False
        cumulative = np.cumsum(weights)  # (K,)
        k = min(int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right")), len(turns) - 1)
        self.paddles.append((starts[k], ends[k]))
        self.last_cells = c.mark(starts[k], ends[k], c.reach)
        return True


def _start(canvas: _Canvas, rng: np.random.Generator, center: np.ndarray | None = None) -> _Snake | None:
    p = canvas.p
    if center is None:
        center = rng.uniform(p.paddle_length, p.resolution - p.paddle_length, 2)
    angle = rng.uniform(0, 2 * math.pi)
    half = 0.5 * p.paddle_length * np.array([math.cos(angle), math.sin(angle)])
    a, b = center - half, center + half
    if not canvas.free(a[None], b[None])[0]:
        return None
    return _Snake(canvas, a, b)


def _targets(canvas: _Canvas, rng: np.random.Generator) -> tuple[_Snake, _Snake] | None:
    p = canvas.p
    border = p.paddle_length + p.marker_radius
    first = rng.uniform(border, p.resolution - border, 2)
    angle = rng.uniform(0, 2 * math.pi)
    second = first + p.seed_distance * np.array([math.cos(angle), math.sin(angle)])
    if not ((second >= border) & (second <= p.resolution - border)).all():
        return None
    snake_a = _start(canvas, rng, first)
    snake_b = _start(canvas, rng, second) if snake_a is not None else None
    if snake_a is None or snake_b is None:
        return None
    for _ in range(p.contour_length - 1):
        if not (snake_a.grow(rng) and snake_b.grow(rng)):
            return None
    return snake_a, snake_b


def generate_pathfinder_image(
    params: PathfinderParams, rng: np.random.Generator, max_attempts: int = 500
) -> tuple[np.ndarray, int]:
    """One image (R, R) uint8 and its label (1: the two markers are on one snake)."""
    p = params
    for _ in range(max_attempts):
        canvas = _Canvas(p)
        pair = _targets(canvas, rng)
        if pair is not None:
            break
    else:
        raise PlacementError(
            f"could not place two target snakes of {p.contour_length} paddles on a "
            f"{p.resolution}px canvas in {max_attempts} attempts; shorten contour_length"
        )
    snake_a, snake_b = pair
    label = int(rng.random() < 0.5)
    start = snake_a.paddles[0][0]
    end = (snake_a if label else snake_b).paddles[-1][1]
    for point in (start, end):  # keep distractors off the markers
        canvas.mark(point, point, p.marker_radius + p.paddle_margin)
    snakes = [snake_a, snake_b]
    length = max(1, p.contour_length // 3)
    for _ in range(max(1, round(p.distractor_paddles / length))):
        snake = next((s for s in (_start(canvas, rng) for _ in range(20)) if s is not None), None)
        if snake is None:
            continue
        for _ in range(length - 1):
            if not snake.grow(rng):
                break
        snakes.append(snake)
    return _render(p, snakes, (start, end)), label


def _render(p: PathfinderParams, snakes: list[_Snake], markers: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    s = p.supersample
    img = Image.new("L", (p.resolution * s, p.resolution * s), 0)
    draw = ImageDraw.Draw(img)
    width = max(1, round(p.paddle_thickness * s))
    for snake in snakes:
        for a, b in snake.paddles:
            draw.line([tuple(a * s), tuple(b * s)], fill=255, width=width)
    r = p.marker_radius * s
    for m in markers:
        draw.ellipse([m[0] * s - r, m[1] * s - r, m[0] * s + r, m[1] * s + r], fill=255)
    return np.asarray(img.resize((p.resolution, p.resolution), Image.Resampling.BOX))  # (R, R) uint8


def _write_batch(job: tuple[PathfinderParams, Path, int, int, int, int]) -> list[str]:
    """Draw and write one image folder ``imgs/<batch>``; returns its metadata rows."""
    params, level_dir, batch, first_index, count, seed = job
    folder = level_dir / "imgs" / str(batch)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i in range(count):
        img, label = generate_pathfinder_image(params, np.random.default_rng([seed, first_index + i]))
        Image.fromarray(img, mode="L").save(folder / f"sample_{i}.png", optimize=False)
        rows.append(
            f"imgs/{batch} sample_{i}.png {i} {label} {params.contour_length} {params.paddle_length:g} "
            f"{params.paddle_thickness:g} {params.paddle_margin:g} {params.continuity:g}"
        )
    return rows


def write_pathfinder_splits(
    out_dir: str | Path,
    num_train: int,
    num_val: int,
    num_test: int,
    params: PathfinderParams,
    seed: int = 0,
    images_per_batch: int = 1000,
    workers: int = 1,
    progress: Callable[[int], None] | None = None,
) -> Path:
    """Write the LRA layout ``out_dir/pathfinder<R>/<level>/{imgs/<b>/sample_<i>.png, metadata/<b>.npy}``.

    Metadata files are plain text (as in the release), one row ``imgs/<b> sample_<i>.png <i> <label> ...`` per
    image. Train, validation and test images go to separate batch folders, listed in ``splits.json`` so that
    ``load_task`` honours the requested sizes (without it, it divides the images 80/10/10). Image ``k`` is
    drawn from ``default_rng([seed, k])``: the output does not depend on ``workers``. Returns the level folder.
    """
    level_dir = Path(out_dir) / f"pathfinder{params.resolution}" / params.level_folder
    (level_dir / "metadata").mkdir(parents=True, exist_ok=True)
    jobs, manifest, batch, index = [], {}, 0, 0
    for split, count in (("train", num_train), ("validation", num_val), ("test", num_test)):
        manifest[split] = []
        for start in range(0, count, images_per_batch):
            n = min(images_per_batch, count - start)
            jobs.append((params, level_dir, batch, index, n, seed))
            manifest[split].append(f"{batch}.npy")
            batch, index = batch + 1, index + n
    # fork (where it exists) spares each worker re-importing torch and datasets through the package
    method = "fork" if "fork" in multiprocessing.get_all_start_methods() else "spawn"
    pool = multiprocessing.get_context(method).Pool(workers) if workers > 1 else None
    try:
        results = pool.imap(_write_batch, jobs) if pool is not None else map(_write_batch, jobs)
        for job, rows in zip(jobs, results, strict=True):
            (level_dir / "metadata" / f"{job[2]}.npy").write_text("\n".join(rows) + "\n")
            if progress is not None:
                progress(len(rows))
    finally:
        if pool is not None:
            pool.terminate()
    (level_dir / "splits.json").write_text(json.dumps(manifest, indent=1))
    return level_dir
