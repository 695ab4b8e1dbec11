"""Reads the scalars out of TensorBoard event files with TensorBoard's own reader.

    .venv/bin/python tests/reference/tensorboard_reader.py LOGDIR

prints {"tags": {tag: [[step, value], ...]}, "kinds": {tag: "simple_value" | "tensor"}}
for every scalar tag in the event files under LOGDIR, in the order TensorBoard keeps them.
The reading is tensorboard.backend.event_processing.event_accumulator.EventAccumulator's,
so it is an independent check of Kiln's event writer (src/kiln/train/observability/tensorboard.cc):
record framing and CRCs, the Event/Summary protos, and TensorBoard's own rules (events
orphaned by a restart to an earlier step are purged, as TensorBoard shows them).

  * size_guidance 0 for scalars and tensors: every event is kept, none sampled away.
  * Scalars may be legacy Summary.Value.simple_value (kind "simple_value") or tensor
    summaries (kind "tensor", e.g. TensorBoard's scalar plugin's summary_v2 form): tensors
    holding exactly one number are converted with tensor_util.make_ndarray; other tensors
    (histograms, text, ...) are not scalars and are left out.
  * Event files directly in LOGDIR give plain tags; those in a subdirectory (a run, as
    TensorBoard's multiplexer would show it) give "RUN/tag", RUN being the path below LOGDIR.
  * Values are JSON numbers, except non-finite ones, which are the strings "NaN",
    "Infinity" and "-Infinity" (the output stays strict JSON).
"""

import json
import math
import os
import sys

from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing import io_wrapper
from tensorboard.util import tensor_util


def number(x):
    x = float(x)
    if math.isnan(x):
        return "NaN"
    if math.isinf(x):
        return "Infinity" if x > 0 else "-Infinity"
    return x


def run_dirs(logdir):
    """The directories under logdir (itself included) holding event files, sorted."""
    runs = []
    for dirpath, _, files in os.walk(logdir):
        if any(io_wrapper.IsSummaryEventsFile(os.path.join(dirpath, f)) for f in files):
            runs.append(dirpath)
    return sorted(runs)


def main():
    if len(sys.argv) != 2:
        print("usage: tensorboard_reader.py LOGDIR", file=sys.stderr)
        sys.exit(2)
    logdir = sys.argv[1]
    if not os.path.isdir(logdir):
        print(f"tensorboard_reader.py: no directory {logdir}", file=sys.stderr)
        sys.exit(2)

    tags, kinds = {}, {}
    for run in run_dirs(logdir):
        acc = ea.EventAccumulator(run, size_guidance={ea.SCALARS: 0, ea.TENSORS: 0})
        acc.Reload()
        rel = os.path.relpath(run, logdir)
        prefix = "" if rel == "." else rel.replace(os.sep, "/") + "/"
        available = acc.Tags()
        for tag in available[ea.SCALARS]:
            tags[prefix + tag] = [[e.step, number(e.value)] for e in acc.Scalars(tag)]
            kinds[prefix + tag] = "simple_value"
        for tag in available[ea.TENSORS]:
            points = []
            for e in acc.Tensors(tag):
                array = tensor_util.make_ndarray(e.tensor_proto)
                if array.size != 1 or array.dtype.kind not in "biuf":
                    points = None
                    break
                points.append([e.step, number(array.reshape(()).item())])
            if points is None:
                continue
            if prefix + tag in tags:  # the same tag written both ways: keep both, by step
                points = sorted(tags[prefix + tag] + points, key=lambda p: p[0])
                kinds[prefix + tag] = "simple_value+tensor"
            else:
                kinds[prefix + tag] = "tensor"
            tags[prefix + tag] = points

    json.dump({"tags": tags, "kinds": kinds}, sys.stdout, allow_nan=False)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
