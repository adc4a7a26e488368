"""Qanat's Python serving worker: loads one MLflow model with mlflow.pyfunc and
answers batches its server sends, until its stdin closes.

Frames both ways are a 4-byte little-endian length and that many bytes. A request is
an Arrow IPC stream of one record batch: one fixed-size list column of float64, the
rows (a text column's place holds NaN), a second fixed-size list column of strings
when the model has text columns (theirs, in order), and in the schema's metadata how the model takes them (`qanat.mode`: `columns`,
a DataFrame of the columns `qanat.names` of numpy types `qanat.types`; `tensor`, one
array of `qanat.dtype` shaped `qanat.shape`; `qanat.text_out` says which of an
answer's columns are text). An answer is a status byte (0: an Arrow IPC stream of
columns, float64 or strings, the predictions as rows; 1: a UTF-8 error) and its
payload. The first frame
the worker writes says it is ready (status 0, a JSON line about itself) or why it is
not (status 1), then it exits.

Whatever the model prints goes to stderr: stdout carries frames only.
"""

import json
import os
import struct
import sys
import traceback


def main():
    # The protocol's own descriptor; fd 1 (and print) become stderr.
    out = os.fdopen(os.dup(1), "wb", buffering=0)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    inp = os.fdopen(os.dup(0), "rb", buffering=0)
    model_dir = sys.argv[1]

    def send(status, payload):
        out.write(struct.pack("<BI", status, len(payload)))
        out.write(payload)

    try:
        import numpy as np
        import pandas as pd
        import pyarrow as pa
        import mlflow.pyfunc

        model = mlflow.pyfunc.load_model(model_dir)
    except BaseException:
        send(1, ("the model could not be loaded:\n" + traceback.format_exc(limit=8)).encode())
        return 3
    send(
        0,
        json.dumps(
            {
                "python": sys.version.split()[0],
                "mlflow": getattr(mlflow, "__version__", "?"),
                "numpy": np.__version__,
            }
        ).encode(),
    )

    def read_exact(n):
        chunks = []
        while n > 0:
            b = inp.read(n)
            if not b:
                return None
            chunks.append(b)
            n -= len(b)
        return b"".join(chunks)

    while True:
        head = read_exact(4)
        if head is None:
            return 0
        (size,) = struct.unpack("<I", head)
        body = read_exact(size)
        if body is None:
            return 0
        try:
            table = pa.ipc.open_stream(body).read_all()
            meta = {k.decode(): v.decode() for k, v in (table.schema.metadata or {}).items()}
            rows = table.num_rows
            col = table.column(0).combine_chunks()
            width = col.type.list_size
            x = col.flatten().to_numpy(zero_copy_only=False).reshape(rows, width)
            if meta.get("qanat.mode") == "tensor":
                shape = json.loads(meta.get("qanat.shape", "[-1]"))
                x = x.astype(meta.get("qanat.dtype", "float32")).reshape([rows] + shape[1:])
            else:
                names = json.loads(meta.get("qanat.names", "[]"))
                types = json.loads(meta.get("qanat.types", "[]"))
                text = None
                if table.num_columns > 1:
                    tc = table.column(1).combine_chunks()
                    text = tc.flatten().to_numpy(zero_copy_only=False).reshape(rows, tc.type.list_size)
                frame, k = {}, 0
                for j, (n, t) in enumerate(zip(names, types)):
                    if t == "str":
                        frame[n] = text[:, k].astype(object)
                        k += 1
                    else:
                        frame[n] = x[:, j].astype(t)
                x = pd.DataFrame(frame)
            y = model.predict(x)
            send(0, encode(np, pd, pa, y, rows, json.loads(meta.get("qanat.text_out", "[]"))))
        except BaseException as e:
            send(1, ("%s: %s" % (type(e).__name__, e)).encode()[:4000])


def text(v):
    """A predicted value as text: bytes decoded, a missing value None."""
    if v is None or (isinstance(v, float) and v != v):
        return None
    if isinstance(v, bytes):
        return v.decode("utf-8", "replace")
    return str(v)


def encode(np, pd, pa, y, rows, text_out):
    """Predictions as columns, one row per input row: strings where `text_out` says
    the signature answers text, float64 elsewhere."""
    if isinstance(y, dict):
        y = pd.DataFrame(y)
    if isinstance(y, (pd.DataFrame, pd.Series)):
        y = y.to_numpy()
    elif hasattr(y, "detach"):
        y = y.detach().cpu().numpy()
    y = np.asarray(y, dtype=object) if isinstance(y, list) and any(text_out) else np.asarray(y)
    y = y.reshape(rows, -1) if y.size else np.zeros((rows, 0))
    cols = []
    for j in range(y.shape[1]):
        c = y[:, j]
        if j < len(text_out) and text_out[j]:
            cols.append(pa.array([text(v) for v in c], type=pa.string()))
            continue
        try:
            c = c.astype("float64")
        except (TypeError, ValueError):
            raise TypeError("the model's predictions are %s, not numbers, where its signature "
                            "says numbers" % c.dtype) from None
        cols.append(pa.array(c))
    batch = pa.RecordBatch.from_arrays(cols, names=[str(j) for j in range(len(cols))])
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as w:
        w.write_batch(batch)
    return sink.getvalue().to_pybytes()


if __name__ == "__main__":
    sys.exit(main())
