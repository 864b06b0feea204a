#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
# More streams than one machine: sattn as a worker on another host.
#
#   sensor host:    frames  --SRT/TCP-->  worker host: sattn  --SRT/TCP-->  collector
#
# Two transports, chosen with --transport srt|tcp before the role (or
# SATTN_TRANSPORT):
#
# srt (the default): SRT with AES encryption, run by scale-out-node.py
# (see its header): the passphrase comes from SATTN_SRT_PASSPHRASE or the
# file named by SATTN_SRT_PASSPHRASE_FILE, never from the command line;
# the sensor and the worker listen, the worker and the collector call
# (so a restarted worker finds its sensor again by itself).
#   scale-out.sh sensor LISTEN_HOST:PORT [BUFFERS [START_NS]]
#   scale-out.sh worker SENSOR_HOST:PORT[,...] LISTEN_HOST:PORT[,...] [sattn props...]
#   scale-out.sh collector WORKER_HOST:PORT[,...] OUT_PREFIX
#   scale-out.sh test OUT_DIR [CASES...]   (scale-out-test.py: basic timing refused
#                                           restart stall many isolation flood mqtt
#                                           mqtt-bound mqtt-cpu takeover split-brain
#                                           takeover-8x2)
# A sensor's id comes from SATTN_SENSOR_ID (default srt-PORT); a worker's
# sensors may be given as ID=HOST:PORT; SATTN_WORKER_ID and SATTN_MQTT_URL
# (mqtts://HOST:PORT) make the worker publish decisions and health to an
# MQTT broker and share its sensors with standby workers (docs/scale-out.md,
# "Decisions to a broker", "Standby workers").
#
# tcp (trusted links only: anyone who reaches a port can send frames or
# read them): the roles below.  Transport: GStreamer's own elements from Debian 12's plugin packages:
# tcpclientsink / tcpserversrc (gst-plugins-base) carry the GStreamer Data
# Protocol (gdppay / gdpdepay, gst-plugins-bad), which serialises each
# buffer with its PTS, DTS and duration plus the caps and the segment
# event, so the receiving pipeline sees the sender's stream unchanged
# (timestamps and segment to the nanosecond, whatever time the sensor
# starts at), and TCP delivers every byte in order: no frame is lost.
# (Matroska, tried first, stores running time and its demuxer restarts the
# segment, so a stream not starting at 0 came back shifted.)  The worker and the
# collector listen (tcpserversrc); the sensor and the worker connect
# (tcpclientsink), so start them in the order collector, worker, sensor.
# The senders do not sync to the clock (sync=false): the worker forwards
# features as soon as they are computed, and a non-live test sensor is not
# held back to real time (nor by its start time: 5 s in the test).
#
# Usage (tcp):
#   scale-out.sh collector PORT OUT.f32         features to OUT.f32
#   scale-out.sh worker PORT COLLECTOR_HOST COLLECTOR_PORT [sattn props...]
#   scale-out.sh sensor WORKER_HOST WORKER_PORT [BUFFERS [START_NS]]
#   scale-out.sh test OUT_DIR                   all three on 127.0.0.1
#
# `test` picks free ports (port=0; each listener reports the port it got),
# runs the three pipelines as separate processes, each bounded by a
# timeout, runs sattn locally on the same frames and checks that the
# features that came back are the local ones: the same number of frames,
# the same timestamps and durations, the same values; once for a sensor
# starting at 0 and once for one whose first timestamp is 5 s.
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
MUX=(gdppay)

sensor () {       # WORKER_HOST WORKER_PORT [BUFFERS [START_NS]]
  gst timeout "$limit" gst-launch-1.0 -q $SENSOR_SRC num-buffers="${3:-200}" \
    timestamp-offset="${4:-0}" \
    ! "$SENSOR_CAPS" ! "${MUX[@]}" ! tcpclientsink sync=false host="$1" port="$2"
}

worker () {       # PORT COLLECTOR_HOST COLLECTOR_PORT [sattn props...]
  local port=$1 chost=$2 cport=$3
  shift 3
  local props=("$@")
  [ ${#props[@]} -gt 0 ] || props=("${SATTN_PROPS[@]}")
  gst timeout "$limit" gst-launch-1.0 -v tcpserversrc host=0.0.0.0 \
    port="$port" ! gdpdepay ! sattn "${props[@]}" ! "${MUX[@]}" \
    ! tcpclientsink sync=false host="$chost" port="$cport"
}

collector () {    # PORT OUT.f32
  gst timeout "$limit" gst-launch-1.0 -v tcpserversrc host=0.0.0.0 \
    port="$1" ! gdpdepay ! identity silent=false \
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
  local out=$1 start
  gst gst-inspect-1.0 gdppay > /dev/null 2>&1 || {
    echo "scale-out: gdppay not found (Debian: gstreamer1.0-plugins-bad)" >&2
    exit 1
  }
  mkdir -p "$out"
  out=$(cd "$out" && pwd)
  # A sensor whose stream starts at 0 and one whose first timestamp is 5 s:
  # the features must come back with the sensor's timestamps either way.
  for start in 0 5000000000; do
    mkdir -p "$out/start-$start"
    run_one "$out/start-$start" "$start"
  done
}

run_one () {      # OUT_DIR START_NS
  local out=$1 start=$2 buffers=200
  rm -f "$out"/*.log "$out"/*.f32

  # Listeners bind on 127.0.0.1 only here.
  gst timeout "$limit" gst-launch-1.0 -v tcpserversrc host=127.0.0.1 port=0 \
    ! gdpdepay ! identity silent=false \
    ! filesink location="$out/remote.f32" > "$out/collector.log" 2>&1 &
  local cpid=$!
  local cport
  cport=$(port_of "$out/collector.log")
  gst timeout "$limit" gst-launch-1.0 -v tcpserversrc host=127.0.0.1 port=0 \
    ! gdpdepay ! sattn "${SATTN_PROPS[@]}" ! "${MUX[@]}" \
    ! tcpclientsink sync=false host=127.0.0.1 port="$cport" > "$out/worker.log" 2>&1 &
  local wpid=$!
  local wport
  wport=$(port_of "$out/worker.log")
  echo "collector on 127.0.0.1:$cport, worker on 127.0.0.1:$wport"
  sensor 127.0.0.1 "$wport" "$buffers" "$start" > "$out/sensor.log" 2>&1
  local rc=0
  wait "$wpid" || rc=$?
  [ $rc -eq 0 ] || { echo "scale-out: worker failed ($rc)" >&2; tail -5 "$out/worker.log" >&2; exit 1; }
  wait "$cpid" || rc=$?
  [ $rc -eq 0 ] || { echo "scale-out: collector failed ($rc)" >&2; tail -5 "$out/collector.log" >&2; exit 1; }

  # The same frames through sattn on this machine.
  gst timeout "$limit" gst-launch-1.0 -v $SENSOR_SRC num-buffers="$buffers" \
    timestamp-offset="$start" ! "$SENSOR_CAPS" ! sattn "${SATTN_PROPS[@]}" ! identity silent=false \
    ! filesink location="$out/local.f32" > "$out/local.log" 2>&1

  buffers_of "$out/collector.log" > "$out/remote.ts"
  buffers_of "$out/local.log" > "$out/local.ts"
  "$python" - "$out" "$buffers" "$start" <<'EOF'
import sys
import numpy as np

out, buffers, start = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
d = 4 * 16                      # channels x frame-size
frames_in = buffers * 160 // 16
remote = np.fromfile(f"{out}/remote.f32", dtype=np.float32).reshape(-1, d)
local = np.fromfile(f"{out}/local.f32", dtype=np.float32).reshape(-1, d)
rts = [l.split() for l in open(f"{out}/remote.ts")]
lts = [l.split() for l in open(f"{out}/local.ts")]
print(f"sensor start {start} ns: frames in {frames_in}, feature frames: remote {len(remote)}, "
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
print(f"row timestamps equal: {same_ts}; first remote {rt[:3]} local {lt[:3]} last {rt[-1:]}")
ok &= same_ts
# The local run starts where the sensor does (the reference is not shifted).
ok &= bool(lt) and lt[0] == start
if len(remote) == len(local):
    err = float(np.max(np.abs(remote.astype(np.float64) - local)))
    print(f"max-abs remote vs local: {err:.3g}")
    ok &= bool(np.all(np.isfinite(remote))) and err <= 1e-6 * (1 + float(np.max(np.abs(local))))
print("scale-out: OK" if ok else "scale-out: FAILED")
sys.exit(0 if ok else 1)
EOF
}

transport=${SATTN_TRANSPORT:-srt}
if [ "${1:-}" = "--transport" ]; then transport=${2:-}; shift 2; fi
case "$transport" in
  srt)
    node=("$python" "$here/scale-out-node.py")
    case "${1:-}" in
      sensor) shift
        exec "${node[@]}" sensor --listen "$1" --buffers "${2:-200}" --start-ns "${3:-0}" ;;
      worker) shift
        s=$1 l=$2; shift 2
        if [ $# -gt 0 ]; then exec "${node[@]}" worker --sensors "$s" --listen "$l" --sattn "$*"
        else exec "${node[@]}" worker --sensors "$s" --listen "$l"; fi ;;
      collector) shift; exec "${node[@]}" collector --workers "$1" --out "$2" ;;
      test) shift; out=${1:-out/scale-out}; shift || true
        exec "$python" "$here/scale-out-test.py" "$out" "$@" ;;
      *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
    esac ;;
  tcp) ;;
  *) echo "scale-out: unknown transport '$transport' (srt or tcp)" >&2; exit 2 ;;
esac

case "${1:-}" in
  sensor) shift; sensor "$@" ;;
  worker) shift; worker "$@" ;;
  collector) shift; collector "$@" ;;
  test) shift; run_test "${1:-out/scale-out}" ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 2 ;;
esac
