"""Writes the request bodies of serving_features_grpc.sh for the breast cancer table:
  rows.jsonl    OIP JSON, the 30 feature columns of one row (FP64, [1, 1])
  keys.jsonl    OIP JSON, the row's entity key only (patient_id, INT64, [1])
  grpc.bin      one gRPC message (5-byte frame + ModelInferRequest protobuf) with
                the same row as raw_input_contents, for h2load's --data
  push.json     the table as a Feast /push body: patient_id 1..N and the 30 features
usage: serving_grpc_bodies.py CSV OUT_DIR MODEL [COUNT]
The protobuf is encoded here by hand (field numbers from the Open Inference Protocol's
grpc_service.proto), so no protobuf package is needed."""
import csv
import json
import random
import struct
import sys

path, out, model = sys.argv[1], sys.argv[2], sys.argv[3]
count = int(sys.argv[4]) if len(sys.argv) > 4 else 200
with open(path) as f:
    table = list(csv.DictReader(f))
features = [c for c in table[0] if c != "diagnosis"]


def varint(n):
    b = bytearray()
    while True:
        byte = n & 0x7F
        n >>= 7
        if n:
            b.append(byte | 0x80)
        else:
            b.append(byte)
            return bytes(b)


def field(number, payload):  # length-delimited
    return varint(number << 3 | 2) + varint(len(payload)) + payload


def text(number, s):
    return field(number, s.encode())


def packed_int64(number, values):
    return field(number, b"".join(varint(v) for v in values))


random.seed(7)
with open(f"{out}/rows.jsonl", "w") as r, open(f"{out}/keys.jsonl", "w") as k:
    for _ in range(count):
        i = random.randrange(len(table))
        row = table[i]
        r.write(json.dumps({"inputs": [
            {"name": c, "datatype": "FP64", "shape": [1, 1], "data": [float(row[c])]}
            for c in features], "outputs": [{"name": "probability"}]}) + "\n")
        k.write(json.dumps({"inputs": [
            {"name": "patient_id", "datatype": "INT64", "shape": [1], "data": [i + 1]}],
            "outputs": [{"name": "probability"}]}) + "\n")

row = table[0]
msg = text(1, model)
for c in features:
    msg += field(5, text(1, c) + text(2, "FP64") + packed_int64(3, [1, 1]))
msg += field(6, text(1, "probability"))
for c in features:
    msg += field(7, struct.pack("<d", float(row[c])))
with open(f"{out}/grpc.bin", "wb") as g:
    g.write(b"\x00" + struct.pack(">I", len(msg)) + msg)

df = {"patient_id": list(range(1, len(table) + 1)),
      "event_timestamp": ["2026-01-01T00:00:00Z"] * len(table)}
for c in features:
    df[c] = [float(r[c]) for r in table]
with open(f"{out}/push.json", "w") as p:
    json.dump({"push_source_name": "cells_push", "to": "online", "df": df}, p)
with open(f"{out}/repo.yaml", "w") as y:
    y.write("kind: entity\nname: patient\njoin_keys: [{name: patient_id, type: int64}]\n---\n"
            "kind: source\nname: cells_push\ntype: push\ntimestamp_field: event_timestamp\n---\n"
            "kind: feature_view\nname: cells\nentities: [patient]\nsource: cells_push\nttl: 0\nschema:\n")
    for c in features:
        y.write(f"  - {{name: {c}, type: float64}}\n")
    y.write("---\nkind: feature_service\nname: cancer_features\nfeatures: [cells]\n")
