#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""sattn's decisions and health to an MQTT broker (mosquitto), with
paho-mqtt: what DeepStream's nvmsgbroker and NNStreamer's mqttsink do for
their pipelines.

As a program, for any single-machine pipeline (one sensor):

    sattn_mqtt.py --mqtt mqtts://HOST:8883 --sensor ID [--node ID] \\
        -- audiotestsrc ... ! sattn weights=model.safetensors output=classes ! fakesink

runs the pipeline (gst-launch-1.0 syntax) and publishes what its sattn
elements post.  As a module, examples/scale-out-node.py's worker uses
Publisher and Coordinator for every sensor it serves.

Topics (ID: [A-Za-z0-9._-], at most 64 characters; not "worker"):
  sattn/ID/class           every `sattn-class` message, JSON, QoS 1
  sattn/ID/health          every health message (`sattn`, post-messages=true), QoS 1
  sattn/ID/status          retained: who serves the sensor (state serving,
                           worker, epoch, since), or released / ended / cut-off
  sattn/worker/NODE/status retained: the node, with a heartbeat (its lease);
                           the broker publishes {"state": "offline"} there
                           (the last will) when the node dies

The JSON of a decision (sattn/ID/class; docs in docs/scale-out.md,
"Decisions to a broker"):
  {"sensor", "worker", "epoch", "seq", "label", "index", "probability",
   "top-k": [{"label", "probability"}...], "in-contract", "input-rms",
   "rejected", "timestamp", "duration", "window-start", "stream-time",
   "running-time", "wall-clock" (ISO 8601, UTC), "wall-clock-ns",
   "discont", "dropped-before"}
A health message carries every field of the element's message, plus
sensor, worker, epoch, seq, wall-clock, wall-clock-ns.

Delivery: QoS 1 in a persistent session (clean_session false), so what the
broker has acknowledged survives the node's reconnections, and what it has
not is sent again; the broker holds a persistent subscriber's messages
while it is away (mosquitto's persistence keeps them across its restarts).
Publishing never blocks the streaming threads: messages go to a queue per
sensor, bounded by SATTN_MQTT_QUEUE messages (default 10000): beyond it
the oldest is dropped and counted (logged, in the node's status, and in
the next decision's "dropped-before").  A feeder thread hands them to
paho in order, at most SATTN_MQTT_INFLIGHT (100) unacknowledged at once.

Secrets and TLS: the broker is reached over TLS only (mqtts://), its
certificate checked against SATTN_MQTT_CAFILE (else the system's CAs);
the user is SATTN_MQTT_USER and the password comes from
SATTN_MQTT_PASSWORD or the file SATTN_MQTT_PASSWORD_FILE (mode 600),
never from the command line.
"""

import collections
import datetime
import json
import os
import re
import ssl
import sys
import threading
import time
from urllib.parse import urlsplit

import paho.mqtt.client as mqtt

ROOT = "sattn"
ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


class ConfigError(Exception):
    pass


def check_id(what, value):
    if not ID_RE.match(value or "") or value == "worker":
        raise ConfigError(f"{what} {value!r}: use 1 to 64 of A-Z a-z 0-9 . _ - "
                          "(not 'worker')")
    return value


def read_secret(var, file_var, what):
    value = os.environ.get(var)
    path = os.environ.get(file_var)
    if value and path:
        raise ConfigError(f"set {var} or {file_var}, not both")
    if path:
        try:
            st = os.stat(path)
            with open(path, encoding="utf-8") as f:
                value = f.read().rstrip("\r\n")
        except OSError as e:
            raise ConfigError(f"cannot read {file_var}: {e}") from None
        if st.st_mode & 0o077:
            print(f"sattn-mqtt: warning: {path} ({what}) is readable by "
                  "others (chmod 600 it)", file=sys.stderr)
    return value or None


def env_num(name, default, cast=int):
    s = os.environ.get(name)
    if s is None or s == "":
        return default
    try:
        v = cast(s)
    except ValueError:
        raise ConfigError(f"{name}={s!r} is not a number") from None
    if v <= 0:
        raise ConfigError(f"{name}={v} must be positive")
    return v


class Config:
    """The broker: URL, credentials, TLS and the bounds, from the
    environment (secrets) and the URL (where)."""

    def __init__(self, url):
        u = urlsplit(url)
        if u.scheme != "mqtts":
            raise ConfigError(f"{url!r}: use mqtts://HOST[:PORT] (TLS; the "
                              "broker setup in docs/scale-out.md)")
        if u.username or u.password:
            raise ConfigError("no credentials in the URL (it is on the command "
                              "line): SATTN_MQTT_USER and SATTN_MQTT_PASSWORD_FILE")
        self.host = u.hostname
        self.port = u.port or 8883
        self.user = os.environ.get("SATTN_MQTT_USER") or None
        self.password = read_secret("SATTN_MQTT_PASSWORD",
                                    "SATTN_MQTT_PASSWORD_FILE", "MQTT password")
        self.cafile = os.environ.get("SATTN_MQTT_CAFILE") or None
        self.queue = env_num("SATTN_MQTT_QUEUE", 10000)
        self.inflight = env_num("SATTN_MQTT_INFLIGHT", 100)
        self.lease_ms = env_num("SATTN_MQTT_LEASE_MS", 1000)
        self.keepalive = env_num("SATTN_MQTT_KEEPALIVE", 2)
        if self.keepalive * 1500 < self.lease_ms:
            raise ConfigError("SATTN_MQTT_KEEPALIVE x 1.5 must be at least the "
                              "lease (SATTN_MQTT_LEASE_MS)")


def wall_iso(ns):
    if ns is None:
        return None
    t = datetime.datetime.fromtimestamp(ns // 1000 / 1e6, datetime.timezone.utc)
    return t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def structure_dict(s):
    """A GstStructure's fields as JSON values."""
    out = {}
    for i in range(s.n_fields()):
        k = s.nth_field_name(i)
        v = s.get_value(k)
        if hasattr(v, "array"):          # Gst.ValueArray / Gst.ValueList
            v = list(v.array)
        elif hasattr(v, "__iter__") and not isinstance(v, (str, bytes)):
            try:
                v = list(v)
            except TypeError:
                v = str(v)
        if isinstance(v, float) and v != v:
            v = None
        elif isinstance(v, (bool, int, float, str, list)) or v is None:
            pass
        else:
            v = str(v)
        out[k] = v
    return out


def class_json(s):
    """The JSON of a sattn-class message (without the node's fields)."""
    d = structure_dict(s)
    labels = d.pop("top-k-labels", []) or []
    probs = d.pop("top-k-probabilities", []) or []
    d["top-k"] = [{"label": l, "probability": p} for l, p in zip(labels, probs)]
    return d


def start_loop(client, log=None):
    """paho's network loop on a thread of its own, as loop_start() runs
    it, but restarted when it raises: paho 1.6.1 lets ssl.SSLEOFError
    (a TLS broker going away while a packet is written) escape its loop,
    which would end the thread and with it every reconnection."""
    def run():
        while not client._thread_terminate:
            try:
                client.loop_forever(retry_first_connection=True)
            except Exception as e:      # noqa: BLE001 (see above)
                if log:
                    log(f"MQTT loop: {type(e).__name__}: {e}; reconnecting")
                try:
                    client._sock_close()
                except Exception:       # noqa: BLE001
                    pass
                time.sleep(0.1)
                continue
            if client._state == mqtt.mqtt_cs_disconnecting:
                break
    # as loop_start(): the socket pair by which publish() from another
    # thread wakes the loop's select() (without it a message waits for
    # the select's 1 s timeout)
    client._sockpairR, client._sockpairW = mqtt._socketpair_compat()
    client._thread_terminate = False
    client._thread = threading.Thread(target=run, daemon=True, name="mqtt-net")
    client._thread.start()


def stop_loop(client):
    """After disconnect(): the loop sends DISCONNECT (so the broker does
    not publish the will) and returns; at most 5 s."""
    t = client._thread
    if t is not None and t is not threading.current_thread():
        t.join(5)
        client._thread_terminate = True
        t.join(1)
    client._thread_terminate = True
    client._thread = None


class Publisher:
    """One node's connection to the broker: bounded per-sensor queues,
    a feeder thread, QoS 1, a persistent session, a retained status with
    a last will."""

    def __init__(self, node_id, cfg, log, may_send=None):
        self.node = check_id("node id", node_id)
        self.cfg = cfg
        self.log = log
        self.may_send = may_send or (lambda sensor: True)
        self.status_topic = f"{ROOT}/worker/{node_id}/status"
        self.cv = threading.Condition()
        self.queues = collections.OrderedDict()   # sensor -> deque of (topic, bytes)
        self.dropped = collections.Counter()      # queue overflow, per sensor
        self.fenced = collections.Counter()       # discarded: another worker serves
        self.published = collections.Counter()    # acknowledged by the broker
        self.pending_drop = collections.Counter() # decisions dropped since the last one
        self.seq = collections.Counter()
        self.inflight = {}                        # mid -> (sensor, send time)
        self.first_ack = {}
        self.connected = False
        self.connects = 0
        self.refused = None
        self.closing = False
        self.listeners = []                       # on_connect / on_message hooks
        c = mqtt.Client(client_id=f"sattn-{node_id}", clean_session=False,
                        protocol=mqtt.MQTTv311)
        if cfg.user:
            c.username_pw_set(cfg.user, cfg.password)
        c.tls_set(ca_certs=cfg.cafile, cert_reqs=ssl.CERT_REQUIRED,
                  tls_version=ssl.PROTOCOL_TLS_CLIENT)
        c.will_set(self.status_topic, json.dumps(
            {"state": "offline", "worker": node_id, "why": "last will"}),
            qos=1, retain=True)
        c.reconnect_delay_set(min_delay=0.1, max_delay=1.0)
        # paho's own queue never fills: the feeder keeps at most
        # cfg.inflight messages in it (max_inflight + the rest queued).
        c.max_inflight_messages_set(cfg.inflight)
        c.on_connect = self._on_connect
        c.on_disconnect = self._on_disconnect
        c.on_publish = self._on_publish
        c.on_message = self._on_message
        c.on_subscribe = self._on_subscribe
        self.client = c
        self.feeder = threading.Thread(target=self._feed, daemon=True,
                                       name="mqtt-feeder")

    # ---------------------------------------------------------- paho side
    def start(self):
        self.client.connect_async(self.cfg.host, self.cfg.port,
                                  keepalive=self.cfg.keepalive)
        start_loop(self.client, self.log)
        self.feeder.start()

    def _on_connect(self, client, _ud, flags, rc):
        if rc != 0:
            self.refused = mqtt.connack_string(rc)
            self.log(f"broker refused the connection: {self.refused}")
            return
        with self.cv:
            self.connected = True
            self.connects += 1
            self.cv.notify_all()
        self.log(f"connected to the broker at {self.cfg.host}:{self.cfg.port} "
                 f"(session present: {bool(flags.get('session present'))})")
        for hook in self.listeners:
            hook("connect", None)

    def _on_disconnect(self, _client, _ud, rc):
        with self.cv:
            self.connected = False
        if not self.closing:
            self.log(f"lost the broker ({mqtt.error_string(rc)}); reconnecting, "
                     "decisions queue meanwhile")
        for hook in self.listeners:
            hook("disconnect", None)

    def _on_subscribe(self, _client, _ud, mid, _qos):
        for hook in self.listeners:
            hook("subscribed", mid)

    def _on_message(self, _client, _ud, msg):
        for hook in self.listeners:
            hook("message", msg)

    def _on_publish(self, _client, _ud, mid):
        with self.cv:
            item = self.inflight.pop(mid, None)
            if item is not None and item[0] is not None:
                self.published[item[0]] += 1
                if item[0] in self.first_ack:
                    del self.first_ack[item[0]]
                    self.log(f"sensor {item[0]}: its first message since it started "
                             f"acknowledged by the broker "
                             f"({1000 * (time.monotonic() - item[1]):.1f} ms after "
                             "it was handed to paho)")
            self.cv.notify_all()
        for hook in self.listeners:
            hook("published", mid)

    def mark(self, sensor):
        """Log when the broker acknowledges the sensor's next message (a
        stream that starts or is taken over)."""
        with self.cv:
            self.first_ack[sensor] = True

    # ------------------------------------------------------- node side
    def add_sensor(self, sensor):
        check_id("sensor id", sensor)
        with self.cv:
            self.queues.setdefault(sensor, collections.deque())

    def _enqueue(self, sensor, topic, obj):
        with self.cv:
            q = self.queues.setdefault(sensor, collections.deque())
            if len(q) >= self.cfg.queue:
                old_topic, _ = q.popleft()
                self.dropped[sensor] += 1
                if old_topic.endswith("/class"):      # decisions: told in the next one
                    self.pending_drop[sensor] += 1
                if self.dropped[sensor] in (1, 10, 100) or \
                        self.dropped[sensor] % 1000 == 0:
                    self.log(f"sensor {sensor}: MQTT queue full "
                             f"({self.cfg.queue}): {self.dropped[sensor]} "
                             "oldest messages dropped so far")
            self.seq[sensor] += 1
            obj["seq"] = self.seq[sensor]
            q.append((topic, obj))
            self.cv.notify_all()

    def decision(self, sensor, obj):
        self._enqueue(sensor, f"{ROOT}/{sensor}/class", obj)

    def health(self, sensor, obj):
        self._enqueue(sensor, f"{ROOT}/{sensor}/health", obj)

    def discard(self, sensor, why):
        """Another worker serves the sensor: what is queued for it is not
        published (counted as fenced)."""
        with self.cv:
            q = self.queues.get(sensor)
            n = len(q) if q else 0
            if q:
                q.clear()
            self.fenced[sensor] += n
        if n:
            self.log(f"sensor {sensor}: {n} queued messages discarded ({why})")
        return n

    def publish_now(self, topic, obj, retain=False, sent=None, at=None):
        """Status and claims: straight to paho (QoS 1), ahead of the queues.
        `sent[mid] = at` is recorded before paho can acknowledge it."""
        payload = json.dumps(obj, separators=(",", ":"))
        with self.client._out_message_mutex:   # mid known before its PUBACK
            info = self.client.publish(topic, payload, qos=1, retain=retain)
            if sent is not None:
                sent[info.mid] = at
        return info.mid

    def _feed(self):
        while True:
            with self.cv:
                while not self.closing:
                    if len(self.inflight) < self.cfg.inflight and any(
                            q and self.may_send(s) for s, q in self.queues.items()):
                        break
                    self.cv.wait(0.05)
                if self.closing and not any(q and self.may_send(s)
                                            for s, q in self.queues.items()):
                    return
                batch = []
                for s, q in self.queues.items():
                    while q and self.may_send(s) and \
                            len(self.inflight) + len(batch) < self.cfg.inflight:
                        topic, obj = q.popleft()
                        if topic.endswith("/class"):
                            # the decisions dropped from the front of the
                            # queue since the last one left it
                            obj["dropped-before"] = self.pending_drop.pop(s, 0)
                        batch.append((s, topic, obj))
            for s, topic, obj in batch:
                payload = json.dumps(obj, separators=(",", ":"))
                # paho's lock held: the PUBACK cannot be handled before the
                # message is counted in flight
                with self.client._out_message_mutex:
                    info = self.client.publish(topic, payload, qos=1)
                    self.inflight[info.mid] = (s, time.monotonic())

    def queued(self):
        with self.cv:
            return sum(len(q) for q in self.queues.values()) + \
                sum(1 for v in self.inflight.values() if v[0] is not None)

    def drain(self, seconds):
        """Wait (at most `seconds`) until the broker has acknowledged every
        queued message."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and (self.queued() or self.inflight):
            time.sleep(0.02)
        return self.queued()

    def stop(self, final_status, drain_s=5.0):
        """Publish the final status, wait (at most drain_s) until the broker
        has every queued message, disconnect."""
        self.publish_now(self.status_topic, final_status, retain=True)
        self.drain(drain_s)
        left = self.queued()
        if left:
            self.log(f"{left} messages not delivered at exit (broker unreachable "
                     f"for {drain_s:.0f} s)")
        with self.cv:
            self.closing = True
            self.cv.notify_all()
        # A TLS close_notify after DISCONNECT: mosquitto 2.0.11 with
        # OpenSSL 3 takes a bare close for a lost client ("disconnected due
        # to out of memory") and publishes the will over the final status.
        c = self.client
        plain_close = c._sock_close

        def close():
            sock = c._sock
            if sock is not None and hasattr(sock, "unwrap"):
                try:
                    sock.settimeout(0.5)
                    sock.unwrap()
                except (OSError, ValueError):
                    pass
            plain_close()

        c._sock_close = close
        c.disconnect()
        stop_loop(c)
        return left


class Coordinator:
    """Which worker serves which sensor, through the broker.

    A claim is the retained sattn/ID/status {"state": "serving", "worker",
    "epoch"}; a worker's lease is its retained sattn/worker/NODE/status
    with a heartbeat every lease/4, whose last will is "offline".  A
    worker serves a sensor only while it holds the claim and its lease is
    valid: lease = send time of the last heartbeat the broker acknowledged
    (sent after this connection's subscription was acknowledged, so every
    claim the broker had arrived before that acknowledgement) + lease_ms.
    A standby takes a sensor over when the serving worker's status is
    offline (its will, or a clean stop), when the sensor is released, or
    when no heartbeat of the serving worker has arrived for 1.5 x lease
    (counted from the standby's own subscription, so a broker restart does
    not hand sensors over); it claims with epoch + 1 and calls the sensor
    with that epoch in its SRT streamid.  Claims compare by (epoch, worker
    id); a worker that sees a higher claim for a sensor it serves stops
    its branch and discards what it had not published (counted as
    fenced); one that sees a lower claim publishes its own again.  The
    sensor refuses a caller whose epoch is below the highest it has
    accepted, so a worker that comes back cannot call it again.
    """

    def __init__(self, pub, worker, sensors, on_serve, on_stop, log,
                 on_standby=None):
        self.on_standby = on_standby or (lambda sensor: None)
        self.pub = pub
        self.me = worker
        self.sensors = list(sensors)
        self.on_serve = on_serve          # (sensor, epoch) -> None, called from paho/tick threads
        self.on_stop = on_stop            # (sensor, why) -> None
        self.log = log
        self.lease_s = pub.cfg.lease_ms / 1000.0
        self.lock = threading.RLock()
        self.role = {s: "waiting" for s in sensors}
        self.epoch = {s: 0 for s in sensors}
        self.claims = {}                  # sensor -> dict (last retained status)
        self.workers = {}                 # worker -> {"state", "seen"}
        self.ready_at = None              # subscription acknowledged, this connection
        self.sub_mid = None
        self.lease_until = 0.0
        self.hb_sent = {}                 # mid -> monotonic send time
        self.hb = 0
        self.stats = {}                   # sensor -> dict, in the claims
        self.takeovers = []               # (sensor, monotonic, why)
        pub.listeners.append(self._event)
        self.thread = threading.Thread(target=self._tick_loop, daemon=True,
                                       name="mqtt-lease")
        self.stopping = False

    # The feeder's gate.  Lock-free (single reads of a dict and a float):
    # the feeder asks under the publisher's lock, and paho calls
    # on_publish under its own.
    def may_send(self, sensor):
        return self.role.get(sensor) in ("serving", "ending") and self.lease_valid()

    def lease_valid(self):
        return time.monotonic() < self.lease_until

    def start(self):
        self.thread.start()

    def _event(self, kind, arg):
        c = self.pub.client
        if kind == "connect":
            with self.lock:
                self.ready_at = None
            mid = c.subscribe([(f"{ROOT}/+/status", 1),
                               (f"{ROOT}/worker/+/status", 1)])[1]
            with self.lock:
                self.sub_mid = mid
        elif kind == "disconnect":
            with self.lock:
                self.ready_at = None
        elif kind == "subscribed":
            with self.lock:
                if arg == self.sub_mid:
                    self.ready_at = time.monotonic()
        elif kind == "published":
            # paho holds its message lock here: take no lock of ours
            t = self.hb_sent.pop(arg, None)
            if t is not None and t + self.lease_s > self.lease_until:
                self.lease_until = t + self.lease_s
        elif kind == "message":
            self._message(arg)

    def _message(self, msg):
        try:
            obj = json.loads(msg.payload.decode())
        except (ValueError, UnicodeDecodeError):
            return
        parts = msg.topic.split("/")
        now = time.monotonic()
        with self.lock:
            if len(parts) == 4 and parts[1] == "worker":
                w = parts[2]
                st = self.workers.setdefault(w, {})
                st["state"] = obj.get("state")
                st["seen"] = now
                return
            if len(parts) != 3 or parts[1] not in self.role:
                return
            s = parts[1]
            self.claims[s] = obj
            w, e = obj.get("worker"), int(obj.get("epoch", 0) or 0)
            if w == self.me:
                return
            if obj.get("state") == "serving":
                if self.role[s] == "serving":
                    if (e, w) > (self.epoch[s], self.me):
                        self.role[s] = "standby"
                        why = f"worker {w} claimed it with epoch {e} (ours {self.epoch[s]})"
                        self.log(f"sensor {s}: stepping back: {why}")
                        self.pub.discard(s, why)
                        self.on_stop(s, why)
                        self.on_standby(s)
                    else:
                        self.log(f"sensor {s}: worker {w} claimed it with epoch {e}; "
                                 f"ours ({self.epoch[s]}, {self.me}) is higher: claimed again")
                        self._claim(s, self.epoch[s])
                elif self.role[s] == "waiting":
                    pass
                else:
                    self.role[s] = "standby"
                # a new claim is a sign of life of its worker
                ws = self.workers.setdefault(w, {})
                ws.setdefault("seen", now)
            elif obj.get("state") == "ended" and self.role[s] != "serving":
                self.role[s] = "ended"

    def _claim(self, s, epoch):
        self.epoch[s] = epoch
        body = {"state": "serving", "worker": self.me, "epoch": epoch,
                "since": wall_iso(time.time_ns())}
        body.update(self.stats.get(s, {}))
        self.pub.publish_now(f"{ROOT}/{s}/status", body, retain=True)

    def set_state(self, s, state, **extra):
        """released / ended / cut-off, or fresh counters while serving."""
        with self.lock:
            self.stats.setdefault(s, {}).update(extra)
            if state == "serving":
                if self.role[s] == "serving":
                    self._claim(s, self.epoch[s])
                return
            if self.role[s] == "serving" or state == "cut-off":
                body = {"state": state, "worker": self.me, "epoch": self.epoch[s],
                        "at": wall_iso(time.time_ns())}
                body.update(self.stats.get(s, {}))
                self.pub.publish_now(f"{ROOT}/{s}/status", body, retain=True)
            if state in ("released", "ended"):
                # what is queued for it still goes out ("ending": the
                # feeder's gate stays open) until the worker stops
                self.role[s] = "ending" if self.role[s] in ("serving", "ending") \
                    and state == "ended" else state

    def _tick_loop(self):
        period = self.lease_s / 4
        while not self.stopping:
            self._tick()
            time.sleep(period)

    def _tick(self):
        now = time.monotonic()
        with self.lock:
            ready = self.ready_at
            if ready is None:
                return
            # heartbeat: the lease
            self.hb += 1
            serving = [s for s in self.sensors if self.role[s] == "serving"]
            body = {"state": "online", "worker": self.me, "heartbeat": self.hb,
                    "lease-ms": int(self.lease_s * 1000), "serves": serving,
                    "standby": [s for s in self.sensors if self.role[s] == "standby"],
                    "dropped": dict(self.pub.dropped),
                    "fenced": dict(self.pub.fenced)}
        self.pub.publish_now(self.pub.status_topic, body, retain=True,
                               sent=self.hb_sent, at=now)
        with self.lock:
            if now - ready < 0.3:
                return               # retained statuses still arriving
            for s in self.sensors:
                role = self.role[s]
                if role in ("serving", "ended", "ending"):
                    continue
                claim = self.claims.get(s)
                why = None
                if claim is None:
                    why = "no worker serves it"
                elif claim.get("worker") == self.me:
                    why = "it was ours"
                elif claim.get("state") in ("released",):
                    why = f"worker {claim.get('worker')} released it"
                elif claim.get("state") == "ended":
                    self.role[s] = "ended"
                    continue
                else:
                    w = claim.get("worker")
                    ws = self.workers.get(w, {})
                    if ws.get("state") == "offline":
                        why = f"worker {w} is offline"
                    else:
                        seen = max(ws.get("seen", 0.0), ready)
                        if now - seen > 1.5 * self.lease_s:
                            why = (f"no heartbeat from worker {w} for "
                                   f"{now - seen:.2f} s (lease {self.lease_s:.2f} s)")
                if why is None:
                    if role == "waiting":
                        self.role[s] = "standby"
                        self.log(f"sensor {s}: standby (served by "
                                 f"{claim.get('worker')}, epoch {claim.get('epoch')})")
                        self.on_standby(s)
                    continue
                epoch = int((claim or {}).get("epoch", 0) or 0) + 1
                self.role[s] = "serving"
                self._claim(s, epoch)
                self.takeovers.append((s, now, why))
                self.log(f"sensor {s}: serving, epoch {epoch} ({why})")
                self.on_serve(s, epoch)

    def stop(self):
        self.stopping = True


# -------------------------------------------------------------- program
def main():
    import argparse
    import gi
    gi.require_version("Gst", "1.0")
    from gi.repository import GLib, Gst

    p = argparse.ArgumentParser(
        description="Run a pipeline and publish its sattn decisions and "
        "health to MQTT (see the module's text)")
    p.add_argument("--mqtt", required=True, help="mqtts://HOST[:PORT]")
    p.add_argument("--sensor", required=True, help="the sensor's id (topics)")
    p.add_argument("--node", help="this node's id (default: the sensor's)")
    p.add_argument("pipeline", nargs="+", help="gst-launch-1.0 syntax")
    a = p.parse_args()
    Gst.init(None)

    def log(msg):
        print(f"sattn-mqtt [{time.monotonic():.3f}]: {msg}", flush=True)

    try:
        cfg = Config(a.mqtt)
        check_id("sensor id", a.sensor)
        pub = Publisher(a.node or a.sensor, cfg, log)
    except ConfigError as e:
        print(f"sattn-mqtt: {e}", file=sys.stderr)
        return 2
    pub.add_sensor(a.sensor)
    pipeline = Gst.parse_launch(" ".join(a.pipeline))
    loop = GLib.MainLoop()
    status = [0]
    seen = [False]

    def on_message(_bus, msg):
        if msg.type == Gst.MessageType.ELEMENT:
            s = msg.get_structure()
            if s is None:
                return
            extra = {"sensor": a.sensor, "worker": pub.node, "epoch": 0}
            # the wall-clock time of the message's running time: now, less
            # how far the pipeline's clock is past it
            wall = None
            ok, rt = s.get_uint64("running-time")
            clock = pipeline.get_clock()
            if ok and clock is not None:
                wall = time.time_ns() - (clock.get_time() - pipeline.get_base_time() - rt)
            if s.get_name() == "sattn-class":
                d = class_json(s)
                first = not seen[0]
                seen[0] = True
                d.update(extra, **{"wall-clock": wall_iso(wall),
                                   "wall-clock-ns": wall, "discont": first})
                pub.decision(a.sensor, d)
            elif s.get_name() in ("sattn", "sattn-health"):
                d = structure_dict(s)
                d.update(extra, **{"wall-clock": wall_iso(wall), "wall-clock-ns": wall})
                pub.health(a.sensor, d)
        elif msg.type == Gst.MessageType.ERROR:
            err, _ = msg.parse_error()
            log(f"error from {msg.src.get_name()}: {err.message}")
            status[0] = 1
            loop.quit()
        elif msg.type == Gst.MessageType.EOS:
            loop.quit()

    bus = pipeline.get_bus()
    bus.add_signal_watch()
    bus.connect("message", on_message)
    pub.start()
    pub.publish_now(pub.status_topic, {"state": "online", "worker": pub.node,
                                       "serves": [a.sensor]}, retain=True)
    pipeline.set_state(Gst.State.PLAYING)
    loop.run()
    pipeline.set_state(Gst.State.NULL)
    left = pub.stop({"state": "offline", "worker": pub.node, "why": "stopped"})
    log(f"published {pub.published[a.sensor]} messages, dropped "
        f"{pub.dropped[a.sensor]}, not delivered {left}")
    return status[0] or (1 if left else 0)


if __name__ == "__main__":
    sys.exit(main())
