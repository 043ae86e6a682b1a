#!/usr/bin/env python3
"""Reads a TensorBoard event file without protobuf or TensorFlow.

An independent check of src/obs/tfevents.cpp: it parses the TFRecord framing,
verifies both masked CRC-32Cs with its own CRC, and decodes the protobuf wire
format by hand with TensorBoard's field numbers (event.proto, summary.proto).
Prints one JSON object per line: {"file_version", "step", "wall_time"} for a
version record, {"tag", "step", "value", "wall_time"} for each scalar.
Exits 1 with a message naming the file and offset on any damage.

usage: read_tfevents.py FILE
"""
import json
import struct
import sys


def _crc32c_table():
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_TABLE = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _TABLE[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def masked_crc32c(data):
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


class Damaged(Exception):
    pass


def read_varint(buf, pos):
    result, shift = 0, 0
    while True:
        if pos >= len(buf):
            raise Damaged("truncated varint")
        b = buf[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, pos
        shift += 7
        if shift > 63:
            raise Damaged("varint too long")


def fields(buf):
    """Yields (field number, wire type, value) of one serialized message."""
    pos = 0
    while pos < len(buf):
        key, pos = read_varint(buf, pos)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, pos = read_varint(buf, pos)
        elif wire == 1:
            if pos + 8 > len(buf):
                raise Damaged("truncated fixed64")
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = read_varint(buf, pos)
            if pos + size > len(buf):
                raise Damaged("truncated length-delimited field")
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 5:
            if pos + 4 > len(buf):
                raise Damaged("truncated fixed32")
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise Damaged("unsupported wire type %d" % wire)
        yield number, wire, value


def decode_value(buf):
    # Summary.Value: tag = 1 (string), simple_value = 2 (float).
    tag, value = None, None
    for number, wire, raw in fields(buf):
        if number == 1 and wire == 2:
            tag = raw.decode("utf-8")
        elif number == 2 and wire == 5:
            value = struct.unpack("<f", raw)[0]
    return tag, value


def decode_event(buf):
    # Event: wall_time = 1 (double), step = 2 (int64), file_version = 3
    # (string), summary = 5 (Summary: repeated Value value = 1).
    event = {"wall_time": 0.0, "step": 0, "values": []}
    for number, wire, raw in fields(buf):
        if number == 1 and wire == 1:
            event["wall_time"] = struct.unpack("<d", raw)[0]
        elif number == 2 and wire == 0:
            event["step"] = raw - (1 << 64) if raw >= (1 << 63) else raw
        elif number == 3 and wire == 2:
            event["file_version"] = raw.decode("utf-8")
        elif number == 5 and wire == 2:
            for vnum, vwire, vraw in fields(raw):
                if vnum == 1 and vwire == 2:
                    event["values"].append(decode_value(vraw))
    return event


def records(data):
    pos = 0
    while pos < len(data):
        if pos + 12 > len(data):
            raise Damaged("offset %d: truncated record header" % pos)
        header = data[pos:pos + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[pos + 8:pos + 12])
        if masked_crc32c(header) != length_crc:
            raise Damaged("offset %d: length CRC mismatch" % pos)
        start = pos + 12
        if start + length + 4 > len(data):
            raise Damaged("offset %d: truncated record data" % pos)
        body = data[start:start + length]
        (data_crc,) = struct.unpack("<I", data[start + length:start + length + 4])
        if masked_crc32c(body) != data_crc:
            raise Damaged("offset %d: data CRC mismatch" % pos)
        yield body
        pos = start + length + 4


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: read_tfevents.py FILE\n")
        return 2
    path = argv[1]
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        sys.stderr.write("%s: cannot read: %s\n" % (path, e.strerror))
        return 1
    out = []
    try:
        for body in records(data):
            event = decode_event(body)
            if "file_version" in event:
                out.append({"file_version": event["file_version"], "step": event["step"],
                            "wall_time": event["wall_time"]})
            for tag, value in event["values"]:
                out.append({"tag": tag, "step": event["step"], "value": value,
                            "wall_time": event["wall_time"]})
    except (Damaged, UnicodeDecodeError) as e:
        sys.stderr.write("%s: %s\n" % (path, e))
        return 1
    for line in out:
        print(json.dumps(line))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
