#!/usr/bin/python3
"""Writes a small torchvision-style image folder, OUT/{train,val}/<class>/,
of PNG and JPEG files for Tandem's imagefolder tests and benchmark.

Debian's python3 has no PIL, so PNG is written with zlib + struct and JPEG
by a small baseline encoder (numpy DCT, fixed 8-bit Huffman codes: valid
JPEG, just not the smallest). The pixels are a pure function of the seed.

  make_image_folder.py OUT [--classes 3] [--train-per-class 12]
      [--val-per-class 4] [--size 24x20..40x36] [--jpeg-only]
      [--subsample 444|420] [--corrupt] [--distinct N]
"""
import argparse
import os
import shutil
import struct
import zlib

import numpy as np


# ---- PNG --------------------------------------------------------------------

def png_bytes(pixels):
    """pixels: uint8 [H, W] (gray), [H, W, 3] (RGB) or [H, W, 4] (RGBA)."""
    h, w = pixels.shape[:2]
    channels = 1 if pixels.ndim == 2 else pixels.shape[2]
    color_type = {1: 0, 3: 2, 4: 6}[channels]
    rows = pixels.reshape(h, w * channels)
    raw = b"".join(b"\x00" + rows[y].tobytes() for y in range(h))

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    ihdr = struct.pack(">IIBBBBB", w, h, 8, color_type, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b"")


# ---- JPEG (baseline) --------------------------------------------------------

def _zigzag():
    order = []
    for s in range(15):
        rows = range(min(s, 7), max(0, s - 7) - 1, -1) if s % 2 == 0 else range(max(0, s - 7), min(s, 7) + 1)
        order.extend(r * 8 + (s - r) for r in rows)
    return np.array(order)


ZIGZAG = _zigzag()
# JPEG Annex K tables (quality 50), natural order.
LUMA_Q = np.array([
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55,
    14, 13, 16, 24, 40, 57, 69, 56, 14, 17, 22, 29, 51, 87, 80, 62,
    18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113, 92,
    49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99])
CHROMA_Q = np.full(64, 99)
CHROMA_Q[[0, 1, 2, 3, 8, 9, 10, 11, 16, 17, 18, 24, 25]] = [17, 18, 24, 47, 18, 21, 26, 66, 24, 26, 56, 47, 66]
_u = np.arange(8)
DCT = np.sqrt(np.where(_u == 0, 1 / 8, 2 / 8))[:, None] * np.cos((2 * _u[None, :] + 1) * _u[:, None] * np.pi / 16)
# Canonical Huffman codes of one length: DC categories 0..11 get 4 bits, the
# 162 AC symbols (EOB, ZRL, run/size pairs) 8 bits; no code is all ones.
DC_SYMBOLS = list(range(12))
AC_SYMBOLS = [0x00, 0xF0] + [(run << 4) | size for run in range(16) for size in range(1, 11)]
DC_CODES = {s: (i, 4) for i, s in enumerate(DC_SYMBOLS)}
AC_CODES = {s: (i, 8) for i, s in enumerate(AC_SYMBOLS)}


def _scaled(table, quality):
    scale = 5000 // quality if quality < 50 else 200 - 2 * quality
    return np.clip((table * scale + 50) // 100, 1, 255)


class _Bits:
    def __init__(self):
        self.out = bytearray()
        self.acc = 0
        self.n = 0

    def put(self, value, length):
        self.acc = (self.acc << length) | (value & ((1 << length) - 1))
        self.n += length
        while self.n >= 8:
            byte = (self.acc >> (self.n - 8)) & 0xFF
            self.out.append(byte)
            if byte == 0xFF:
                self.out.append(0)  # byte stuffing
            self.n -= 8
        self.acc &= (1 << self.n) - 1

    def flush(self):
        if self.n:
            self.put((1 << (8 - self.n)) - 1, 8 - self.n)


def _category(v):
    return int(abs(v)).bit_length()


def _encode_block(bits, coefs, prev_dc):
    diff = int(coefs[0]) - prev_dc
    size = _category(diff)
    bits.put(*DC_CODES[size])
    if size:
        bits.put(diff if diff > 0 else diff + (1 << size) - 1, size)
    nonzero = np.nonzero(coefs[1:])[0]
    last = 0
    for k in nonzero + 1:
        run = k - last - 1
        while run > 15:
            bits.put(*AC_CODES[0xF0])
            run -= 16
        v = int(coefs[k])
        size = _category(v)
        bits.put(*AC_CODES[(run << 4) | size])
        bits.put(v if v > 0 else v + (1 << size) - 1, size)
        last = k
    if last != 63:
        bits.put(*AC_CODES[0x00])
    return int(coefs[0])


def _blocks(plane, q):
    """Quantised zigzag coefficients of every 8x8 block: [by, bx, 64]."""
    h, w = plane.shape
    b = plane.reshape(h // 8, 8, w // 8, 8).transpose(0, 2, 1, 3) - 128.0
    coefs = np.einsum("ux,abxy,vy->abuv", DCT, b, DCT).reshape(h // 8, w // 8, 64)
    return np.round(coefs[:, :, ZIGZAG] / q[ZIGZAG]).astype(np.int32)


def _pad(plane, mult):
    h, w = plane.shape
    return np.pad(plane, ((0, -h % mult), (0, -w % mult)), mode="edge")


def jpeg_bytes(pixels, quality=90, subsample="444"):
    """pixels: uint8 [H, W] (gray) or [H, W, 3] (RGB)."""
    h, w = pixels.shape[:2]
    lq, cq = _scaled(LUMA_Q, quality), _scaled(CHROMA_Q, quality)
    px = pixels.astype(np.float64)
    gray = px.ndim == 2
    if gray:
        planes = [(_blocks(_pad(px, 8), lq), 0)]
        sampling = [0x11]
        mcu = 8
    else:
        r, g, b = px[..., 0], px[..., 1], px[..., 2]
        y = 0.299 * r + 0.587 * g + 0.114 * b
        cb = -0.168736 * r - 0.331264 * g + 0.5 * b + 128
        cr = 0.5 * r - 0.418688 * g - 0.081312 * b + 128
        mcu = 16 if subsample == "420" else 8
        y = _pad(y, mcu)
        cb, cr = _pad(cb, mcu), _pad(cr, mcu)
        if subsample == "420":
            cb = cb.reshape(cb.shape[0] // 2, 2, cb.shape[1] // 2, 2).mean(axis=(1, 3))
            cr = cr.reshape(cr.shape[0] // 2, 2, cr.shape[1] // 2, 2).mean(axis=(1, 3))
        planes = [(_blocks(y, lq), 0), (_blocks(cb, cq), 1), (_blocks(cr, cq), 1)]
        sampling = [0x22 if subsample == "420" else 0x11, 0x11, 0x11]
    out = bytearray(b"\xFF\xD8")
    out += b"\xFF\xE0" + struct.pack(">H5sBBBHHBB", 16, b"JFIF\0", 1, 1, 0, 1, 1, 0, 0)
    for tq, table in enumerate([lq] if gray else [lq, cq]):
        out += b"\xFF\xDB" + struct.pack(">HB", 67, tq) + bytes(int(v) for v in table[ZIGZAG])
    ncomp = len(planes)
    out += b"\xFF\xC0" + struct.pack(">HBHHB", 8 + 3 * ncomp, 8, h, w, ncomp)
    for i in range(ncomp):
        out += struct.pack(">BBB", i + 1, sampling[i], planes[i][1])
    for cls, symbols in ((0, DC_SYMBOLS), (1, AC_SYMBOLS)):
        counts = [0] * 16
        counts[(4 if cls == 0 else 8) - 1] = len(symbols)
        out += b"\xFF\xC4" + struct.pack(">HB", 3 + 16 + len(symbols), cls << 4) + bytes(counts) + bytes(symbols)
    out += b"\xFF\xDA" + struct.pack(">HB", 6 + 2 * ncomp, ncomp)
    for i in range(ncomp):
        out += struct.pack(">BB", i + 1, 0x00)
    out += bytes([0, 63, 0])
    bits = _Bits()
    prev = [0] * ncomp
    if ncomp == 1:
        blocks = planes[0][0]
        for by in range(blocks.shape[0]):
            for bx in range(blocks.shape[1]):
                prev[0] = _encode_block(bits, blocks[by, bx], prev[0])
    else:
        ys = 2 if subsample == "420" else 1
        rows, cols = planes[1][0].shape[:2]
        for my in range(rows):
            for mx in range(cols):
                for dy in range(ys):
                    for dx in range(ys):
                        prev[0] = _encode_block(bits, planes[0][0][my * ys + dy, mx * ys + dx], prev[0])
                for c in (1, 2):
                    prev[c] = _encode_block(bits, planes[c][0][my, mx], prev[c])
    bits.flush()
    return bytes(out + bits.out + b"\xFF\xD9")


# ---- the folder -------------------------------------------------------------

def sample_pixels(rng, label, h, w):
    """A class-coloured smooth pattern with some texture, RGB uint8."""
    yy, xx = np.mgrid[0:h, 0:w]
    base = np.zeros((h, w, 3))
    base[..., label % 3] = 150 + 60 * np.sin(xx / (3 + label) + rng.uniform(0, 6))
    base[..., (label + 1) % 3] = 60 + 40 * np.cos(yy / (4 + label) + rng.uniform(0, 6))
    base += rng.normal(0, 12, size=(h, w, 3))
    return np.clip(base, 0, 255).astype(np.uint8)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("out")
    p.add_argument("--classes", type=int, default=3)
    p.add_argument("--train-per-class", type=int, default=12)
    p.add_argument("--val-per-class", type=int, default=4)
    p.add_argument("--size", default="24x20..40x36", help="WxH, or a range WxH..WxH")
    p.add_argument("--jpeg-only", action="store_true")
    p.add_argument("--subsample", choices=["444", "420"], default="444")
    p.add_argument("--quality", type=int, default=90)
    p.add_argument("--corrupt", action="store_true", help="add train/<class 1>/broken.jpg that is no image")
    p.add_argument("--distinct", type=int, default=0, help="encode this many images per split, copy the rest")
    p.add_argument("--seed", type=int, default=1)
    a = p.parse_args()
    lo, _, hi = a.size.partition("..")
    (w0, h0), (w1, h1) = [tuple(int(v) for v in s.split("x")) for s in (lo, hi or lo)]
    names = ["class_%02d" % c for c in range(a.classes)]
    rng = np.random.default_rng(a.seed)
    for split, per_class in (("train", a.train_per_class), ("val", a.val_per_class)):
        encoded = []
        for c, name in enumerate(names):
            d = os.path.join(a.out, split, name)
            os.makedirs(d, exist_ok=True)
            for i in range(per_class):
                # Every 4th file PNG, every 3rd grayscale, some PNGs RGBA.
                png = not a.jpeg_only and i % 4 == 1
                path = os.path.join(d, "img_%04d.%s" % (i, "png" if png else "jpg"))
                if a.distinct and len(encoded) >= a.distinct and not png:
                    shutil.copyfile(encoded[i % a.distinct], path)
                    continue
                w = int(rng.integers(w0, w1 + 1))
                h = int(rng.integers(h0, h1 + 1))
                px = sample_pixels(rng, c, h, w)
                if not a.jpeg_only and i % 3 == 2:
                    px = px.mean(axis=2).astype(np.uint8)
                elif png and i % 7 == 1:
                    px = np.dstack([px, np.full((h, w), 77, np.uint8)])
                with open(path, "wb") as f:
                    f.write(png_bytes(px) if png else jpeg_bytes(px, a.quality, a.subsample))
                if not png:
                    encoded.append(path)
    if a.corrupt:
        with open(os.path.join(a.out, "train", names[1 % a.classes], "broken.jpg"), "wb") as f:
            f.write(b"this is not an image, whatever its name says\n")


if __name__ == "__main__":
    main()
