#!/usr/bin/env bash
# More streams than one machine: sattn as a worker on another host.
#
#   sensor host:    frames  --TCP-->  worker host: sattn  --TCP-->  collector
#
# Transport: GStreamer's own elements from Debian 12's plugin packages:
# tcpclientsink / tcpserversrc (gst-plugins-base) carry a Matroska stream
# (matroskamux / matroskademux, gst-plugins-good) with timecodescale=1, so
# every buffer keeps its caps and its timestamp to the nanosecond, and TCP
# delivers every byte in order: no frame is lost.  The worker and the
# collector listen (tcpserversrc); the sensor and the worker connect
# (tcpclientsink), so start them in the order collector, worker, sensor.
#
# Usage:
#   scale-out.sh collector PORT OUT.f32         features to OUT.f32
#   scale-out.sh worker PORT COLLECTOR_HOST COLLECTOR_PORT [sattn props...]
#   scale-out.sh sensor WORKER_HOST WORKER_PORT [BUFFERS]
#   scale-out.sh test OUT_DIR                   all three on 127.0.0.1
#
# `test` picks free ports (port=0; each listener reports the port it got),
# runs the three pipelines as separate processes, each bounded by a
# timeout, runs sattn locally on the same frames and checks that the
# features that came back are the local ones: the same number of frames,
# the same timestamps and durations, the same values.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
python=${PYTHON:-}
if [ -z "$python" ]; then
  if [ -x /usr/bin/python3 ]; then python=/usr/bin/python3; else python=python3; fi
fi
# Bound on every pipeline (seconds).
limit=${SATTN_SCALE_OUT_TIMEOUT:-30}

gst () {
  if [ -n "${SATTN_GST_PRELOAD:-}" ]; then
    LD_PRELOAD="${SATTN_GST_PRELOAD}${LD_PRELOAD:+ $LD_PRELOAD}" "$@"
  else
    "$@"
  fi
}

# The sensor's frames: 4 channels at 16 kHz (a deterministic signal, so a
# local run sees the same frames).
SENSOR_SRC="audiotestsrc wave=sine freq=330 samplesperbuffer=160"
SENSOR_CAPS="audio/x-raw,format=F32LE,layout=interleaved,channels=4,rate=16000"
SATTN_PROPS=(frame-size=16 window=32 hop=8 heads=4)
MUX=(matroskamux streamable=true timecodescale=1)

sensor () {       # WORKER_HOST WORKER_PORT [BUFFERS]
  gst timeout "$limit" gst-launch-1.0 -q $SENSOR_SRC num-buffers="${3:-200}" \
    ! "$SENSOR_CAPS" ! "${MUX[@]}" ! tcpclientsink host="$1" port="$2"
}

worker () {       # PORT COLLECTOR_HOST COLLECTOR_PORT [sattn props...]
  local port=$1 chost=$2 cport=$3
  shift 3
  local props=("$@")
  [ ${#props[@]} -gt 0 ] || props=("${SATTN_PROPS[@]}")
  gst timeout "$limit" gst-launch-1.0 -v tcpserversrc host=0.0.0.0 \
    port="$port" ! matroskademux ! sattn "${props[@]}" ! "${MUX[@]}" \
    ! tcpclientsink host="$chost" port="$cport"
}

collector () {    # PORT OUT.f32
  gst timeout "$limit" gst-launch-1.0 -v tcpserversrc host=0.0.0.0 \
    port="$1" ! matroskademux ! identity silent=false \
    ! filesink location="$2"
}

# The port a `gst-launch-1.0 -v` log says its tcpserversrc got.
port_of () {
  local log=$1 i
  for i in $(seq 1 100); do
    if grep -q 'current-port = [1-9]' "$log" 2>/dev/null; then
      grep -m1 -o 'current-port = [0-9]*' "$log" | sed 's/.*= //'
      return 0
    fi
    sleep 0.1
  done
  echo "scale-out: no listening port in $log" >&2
  return 1
}

# "pts duration bytes" of every buffer identity logged.
buffers_of () {
  grep -o 'chain .*(identity[^)]*) ([0-9]* bytes, dts: [^,]*, pts: [^,]*, duration: [^,]*' "$1" \
    | sed -E 's/.*\(([0-9]*) bytes, dts: [^,]*, pts: ([^,]*), duration: (.*)/\2 \3 \1/'
}

run_test () {
  local out=$1 buffers=200
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  rm -f "$out"/*.log "$out"/*.f32

  # Listeners bind on 127.0.0.1 only here.
  gst timeout "$limit" gst-launch-1.0 -v tcpserversrc host=127.0.0.1 port=0 \
    ! matroskademux ! identity silent=false \
    ! filesink location="$out/remote.f32" > "$out/collector.log" 2>&1 &
  local cpid=$!
  local cport
  cport=$(port_of "$out/collector.log")
  gst timeout "$limit" gst-launch-1.0 -v tcpserversrc host=127.0.0.1 port=0 \
    ! matroskademux ! sattn "${SATTN_PROPS[@]}" ! "${MUX[@]}" \
    ! tcpclientsink host=127.0.0.1 port="$cport" > "$out/worker.log" 2>&1 &
  local wpid=$!
  local wport
  wport=$(port_of "$out/worker.log")
  echo "collector on 127.0.0.1:$cport, worker on 127.0.0.1:$wport"
  sensor 127.0.0.1 "$wport" "$buffers" > "$out/sensor.log" 2>&1
  local rc=0
  wait "$wpid" || rc=$?
  [ $rc -eq 0 ] || { echo "scale-out: worker failed ($rc)" >&2; tail -5 "$out/worker.log" >&2; exit 1; }
  wait "$cpid" || rc=$?
  [ $rc -eq 0 ] || { echo "scale-out: collector failed ($rc)" >&2; tail -5 "$out/collector.log" >&2; exit 1; }

  # The same frames through sattn on this machine.
  gst timeout "$limit" gst-launch-1.0 -v $SENSOR_SRC num-buffers="$buffers" \
    ! "$SENSOR_CAPS" ! sattn "${SATTN_PROPS[@]}" ! identity silent=false \
    ! filesink location="$out/local.f32" > "$out/local.log" 2>&1

  buffers_of "$out/collector.log" > "$out/remote.ts"
  buffers_of "$out/local.log" > "$out/local.ts"
  "$python" - "$out" "$buffers" <<'EOF'
import sys
import numpy as np

out, buffers = sys.argv[1], int(sys.argv[2])
d = 4 * 16                      # channels x frame-size
frames_in = buffers * 160 // 16
remote = np.fromfile(f"{out}/remote.f32", dtype=np.float32).reshape(-1, d)
local = np.fromfile(f"{out}/local.f32", dtype=np.float32).reshape(-1, d)
rts = [l.split() for l in open(f"{out}/remote.ts")]
lts = [l.split() for l in open(f"{out}/local.ts")]
print(f"frames in {frames_in}, feature frames: remote {len(remote)}, "
      f"local {len(local)}; buffers: remote {len(rts)}, local {len(lts)}")
ok = len(remote) == frames_in and len(local) == frames_in
# Timestamps: every remote buffer's pts/duration as the local run's, over
# the same rows (buffers may be cut differently: compare row by row).
def row_times(ts):
    t = []
    for pts, dur, size in ts:
        def ns(s):
            h, m, sec = s.split(":")
            whole, frac = sec.split(".")
            return ((int(h) * 60 + int(m)) * 60 + int(whole)) * 10**9 + int(frac)
        rows = int(size) // (4 * d)
        p, du = ns(pts), ns(dur)
        t += [p + du * i // rows for i in range(rows)]
    return t
rt, lt = row_times(rts), row_times(lts)
same_ts = rt == lt
print(f"row timestamps equal: {same_ts}; first {rt[:3]} last {rt[-1:]}")
ok &= same_ts
if len(remote) == len(local):
    err = float(np.max(np.abs(remote.astype(np.float64) - local)))
    print(f"max-abs remote vs local: {err:.3g}")
    ok &= bool(np.all(np.isfinite(remote))) and err <= 1e-6 * (1 + float(np.max(np.abs(local))))
print("scale-out: OK" if ok else "scale-out: FAILED")
sys.exit(0 if ok else 1)
EOF
}

case "${1:-}" in
  sensor) shift; sensor "$@" ;;
  worker) shift; worker "$@" ;;
  collector) shift; collector "$@" ;;
  test) shift; run_test "${1:-out/scale-out}" ;;
  *) sed -n '2,25p' "$0" >&2; exit 2 ;;
esac
