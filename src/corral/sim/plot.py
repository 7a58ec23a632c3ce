"""GPUs busy over time, one line per policy, as a PNG.  matplotlib is used when it can be
imported; otherwise a small chart is drawn here and written with zlib (no dependency)."""

from __future__ import annotations

import struct
import zlib
from collections.abc import Sequence
from pathlib import Path

COLOURS = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40), (148, 103, 189),
           (140, 86, 75)]


def plot_busy(path: Path, names: Sequence[str], series: Sequence[list[tuple[float, int]]],
              total_gpus: int) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        write_png(path, *draw(names, series, total_gpus))
        return
    fig, ax = plt.subplots(figsize=(10, 4))
    for name, s in zip(names, series, strict=True):
        if s:
            ax.step([t / 3600 for t, _ in s], [b for _, b in s], where="post", label=name)
    ax.set_xlabel("hours")
    ax.set_ylabel("GPUs busy")
    ax.set_ylim(0, total_gpus * 1.05)
    ax.legend()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def draw(names: Sequence[str], series: Sequence[list[tuple[float, int]]], total_gpus: int,
         width: int = 900, height: int = 300) -> tuple[int, int, list[bytearray]]:
    """An RGB canvas: axes, a grey line at the cluster's size, one step line per policy in
    its colour, and a legend of coloured bars (top left, in the policies' order)."""
    px = [bytearray(b"\xff" * (width * 3)) for _ in range(height)]
    left, bottom, top, right = 10, height - 10, 30, width - 10
    end = max((s[-1][0] for s in series if s), default=1.0) or 1.0
    top_gpus = max(1, total_gpus)

    def put(x: int, y: int, c: tuple[int, int, int]) -> None:
        if 0 <= x < width and 0 <= y < height:
            px[y][3 * x:3 * x + 3] = bytes(c)

    def vline(x: int, y0: int, y1: int, c: tuple[int, int, int]) -> None:
        for y in range(min(y0, y1), max(y0, y1) + 1):
            put(x, y, c)

    def ypos(busy: int) -> int:
        return bottom - round((bottom - top) * min(busy, top_gpus) / top_gpus)

    for x in range(left, right + 1):
        put(x, bottom, (0, 0, 0))
        if x % 4 == 0:
            put(x, ypos(top_gpus), (160, 160, 160))
    vline(left, top, bottom, (0, 0, 0))
    for i, s in enumerate(series):
        c = COLOURS[i % len(COLOURS)]
        for k in range(6):  # legend bar
            for x in range(left + 5 + 40 * i, left + 35 + 40 * i):
                put(x, 8 + k, c)
        prev_y = ypos(0)
        points = s + [(end, s[-1][1])] if s else []
        for (t, busy), (t_next, _) in zip(points, points[1:], strict=False):
            x0 = left + round((right - left) * t / end)
            x1 = left + round((right - left) * t_next / end)
            y = ypos(busy) + i  # a pixel apart, so equal lines stay visible
            vline(x0, prev_y, y, c)
            for x in range(x0, x1 + 1):
                put(x, y, c)
            prev_y = y
    return width, height, px


def write_png(path: Path, width: int, height: int, rows: list[bytearray]) -> None:
    def chunk(kind: bytes, data: bytes) -> bytes:
        body = kind + data
        return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))

    raw = b"".join(b"\x00" + bytes(r) for r in rows)
    png = (b"\x89PNG\r\n\x1a\n"
           + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
           + chunk(b"IDAT", zlib.compress(raw, 9)) + chunk(b"IEND", b""))
    path.write_bytes(png)
