#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""The TRAINING generator: complex baseband (I/Q) windows of ten
modulations, plus an "unknown" class (noise and unmodulated carriers),
through the impairments a real receiver sees.  numpy only, seeded,
vectorised over windows; nothing is downloaded.

The stream is 2-channel float32 I/Q at SAMPLE_RATE (64 kHz): channel 0 = I,
channel 1 = Q, interleaved, as `rawaudioparse num-channels=2` reads it.
Digital modulations run at 8 kbaud (8 samples per symbol).

evalgen.py is a second generator written independently of this one (no
shared code, other pulse-shaping, channel and message code); it is used
for evaluation only, never for training.

Classes (LABELS):
  BPSK, QPSK, 8PSK, QAM16, QAM64, PAM4   root-raised-cosine pulses,
                                         roll-off 0.2 ... 0.5
  GFSK      Gaussian FSK, BT 0.3 ... 0.5, modulation index 0.45 ... 0.55
  CPFSK     continuous-phase FSK (rectangular), index 0.45 ... 0.55
  AM-DSB    double-sideband AM with carrier, index 0.2 ... 0.9, a
            band-limited random message (0.3 ... 3.4 kHz)
  WBFM      FM, peak deviation 3 ... 9 kHz, the same kind of message
  unknown   none of the ten: white Gaussian noise alone, band-limited
            Gaussian noise (1 ... 30 kHz wide, anywhere in the band), an
            unmodulated carrier (a complex tone anywhere in +-20 kHz) or a
            real sine (a tone on one axis of the I/Q plane).  OFDM,
            single-sideband AM and chirps are never generated here: they
            stay unseen, for the rejection test.

Each modulation is generated at 4x the sample rate in the transmitter's
time and read at the receiver's sample instants n (1 + sro) + timing by
linear interpolation: that gives the timing offset (a random fraction of a
symbol) and the sample-rate offset (clock drift) to every class alike.

The channel and receiver (IMPAIRMENTS, the training ranges; each drawn per
window, uniformly unless said otherwise):
  - fading: none (1/4), Rician with K 0 ... 15 dB (1/2) or Rayleigh
    (1/4), time-varying with a maximum Doppler of 0 ... 60 Hz (a
    sum-of-sinusoids Clarke model; the Rician line of sight at its own
    Doppler shift);
  - an echo with probability 1/2: delay 0.5 ... 2.5 samples, -20 ... -6 dB,
    Rayleigh with the same Doppler;
  - carrier frequency offset +-1 kHz, carrier phase, phase noise (Wiener,
    linewidth 0 ... 10 Hz);
  - sample-rate offset +-500 ppm;
  - AWGN at the window's SNR, -10 ... +20 dB (integer dB): the received
    signal is scaled to unit power over the window first, so SNR is what
    the receiver sees in that window;
  - I/Q gain imbalance +-1 dB and phase imbalance +-5 degrees, a DC offset
    of 0 ... -20 dBc;
  - the whole window scaled by -50 ... +50 dB around unit power (the
    model's own input normalisation removes it; wider than the +-40 dB
    it is asked to take, so that those stay inside its input contract).

Use: windows (N, n_samples, 2) for training (make_windows), or a stream
whose modulation and SNR change every segment (make_stream).  A spec
(dict) given to either overrides IMPAIRMENTS: evaluate.py uses that to
sweep one impairment at a time.
"""

import numpy as np

SAMPLE_RATE = 64000
SPS = 8                         # samples per symbol
MODULATIONS = ["BPSK", "QPSK", "8PSK", "QAM16", "QAM64", "PAM4", "GFSK",
               "CPFSK", "AM-DSB", "WBFM"]
UNKNOWN = "unknown"
LABELS = MODULATIONS + [UNKNOWN]
N_MOD = len(MODULATIONS)
SNR_RANGE = (-10, 20)
OVER = 4                        # the fine grid: 4 points per sample
SPAN = 8                        # RRC span, symbols each side

# How the recogniser frames the stream: windows of FRAMES frames of
# FRAME_SAMPLES I/Q samples (frame-size on the 2-channel stream).
FRAME_SAMPLES = 16
FRAMES = 64
WINDOW_SAMPLES = FRAME_SAMPLES * FRAMES

# The training distribution.  Ranges are (lo, hi), drawn uniformly per
# window; "fading" gives the probabilities of none, Rician, Rayleigh;
# *_sign ranges are magnitudes with a random sign.
IMPAIRMENTS = dict(
    snr_db=SNR_RANGE,
    rolloff=(0.2, 0.5),
    fading=(0.25, 0.5, 0.25),
    rician_k_db=(0.0, 15.0),
    doppler_hz=(0.0, 60.0),
    echo_prob=0.5,
    echo_db=(-20.0, -6.0),
    echo_delay=(0.5, 2.5),
    cfo_hz=(0.0, 1000.0),          # magnitude, random sign
    phase_noise_hz=(0.0, 10.0),    # Wiener linewidth
    sro_ppm=(0.0, 500.0),          # magnitude, random sign
    iq_gain_db=(0.0, 1.0),         # magnitude, random sign
    iq_phase_deg=(0.0, 5.0),       # magnitude, random sign
    dc_dbc=(-60.0, -20.0),         # DC offset power relative to the signal
    amp_db=(-50.0, 50.0),          # wider than the +-40 dB asked for
)

# No impairment at all (AWGN only): the base of the one-at-a-time sweeps.
CLEAN = dict(IMPAIRMENTS, rolloff=(0.35, 0.35), fading=(1.0, 0.0, 0.0),
             doppler_hz=(0.0, 0.0), echo_prob=0.0, cfo_hz=(0.0, 0.0),
             phase_noise_hz=(0.0, 0.0), sro_ppm=(0.0, 0.0),
             iq_gain_db=(0.0, 0.0), iq_phase_deg=(0.0, 0.0),
             dc_dbc=(-300.0, -300.0), amp_db=(0.0, 0.0))


def sattn_argv(launch, src, model, dst, options=(), flags=("-q",)):
    """gst-launch-1.0 arguments running the raw 2-channel F32 file src
    through sattn weights=model, one window per row (hop = window), with
    the class probabilities written to dst: filesrc ! rawaudioparse !
    sattn ... output=classes options ! other/tensors ! filesink."""
    return ([launch] + list(flags) +
            ["filesrc", "location=" + src, "!", "rawaudioparse",
             "use-sink-caps=false", "format=pcm", "pcm-format=f32le",
             "num-channels=2", "sample-rate=%d" % SAMPLE_RATE, "!",
             "sattn", "weights=" + model, "frame-size=%d" % FRAME_SAMPLES,
             "window=%d" % FRAMES, "hop=%d" % FRAMES, "output=classes"] +
            list(options) +
            ["!", "other/tensors", "!", "filesink", "location=" + dst])


# ------------------------------------------------------------ helpers

def _u(rng, rng_range, size):
    lo, hi = rng_range
    return rng.uniform(lo, hi, size) if hi > lo else np.full(size, float(lo))


def _signed(rng, rng_range, size):
    return _u(rng, rng_range, size) * rng.choice([-1.0, 1.0], size)


def _fft_filter(x, h):
    """Rows of x (B, L) convolved with rows (or one row) of h, 'full' cut
    to L samples, centred on h's middle tap."""
    L, T = x.shape[1], h.shape[-1]
    n = 1 << int(np.ceil(np.log2(L + T)))
    y = np.fft.ifft(np.fft.fft(x, n) * np.fft.fft(h, n), n)
    c = T // 2
    return y[:, c:c + L]


def rrc_taps(beta, sps):
    """Root-raised-cosine taps for each roll-off in beta (B,), SPAN
    symbols each side at sps points per symbol, unit energy: (B, T)."""
    beta = np.asarray(beta, float)[:, None]
    t = (np.arange(-SPAN * sps, SPAN * sps + 1) / sps)[None, :]
    with np.errstate(divide="ignore", invalid="ignore"):
        num = np.sin(np.pi * t * (1 - beta)) + 4 * beta * t * np.cos(
            np.pi * t * (1 + beta))
        den = np.pi * t * (1 - (4 * beta * t) ** 2)
        h = num / den
    at0 = np.abs(t) < 1e-12
    h = np.where(at0, 1.0 - beta + 4 * beta / np.pi, h)
    sing = np.abs(np.abs(t) - 1 / (4 * beta)) < 1e-9
    lim = (beta / np.sqrt(2)) * ((1 + 2 / np.pi) * np.sin(np.pi / (4 * beta))
                                 + (1 - 2 / np.pi) * np.cos(np.pi /
                                                            (4 * beta)))
    h = np.where(sing, lim, h)
    return h / np.sqrt(np.sum(h ** 2, axis=1, keepdims=True))


def constellation(name):
    if name == "BPSK":
        c = np.array([1, -1], complex)
    elif name == "QPSK":
        c = np.exp(1j * (np.pi / 4 + np.pi / 2 * np.arange(4)))
    elif name == "8PSK":
        c = np.exp(1j * np.pi / 4 * np.arange(8))
    elif name == "PAM4":
        c = np.array([-3, -1, 1, 3], complex)
    elif name in ("QAM16", "QAM64"):
        m = 4 if name == "QAM16" else 8
        a = np.arange(m) * 2 - (m - 1)
        c = (a[:, None] + 1j * a[None, :]).reshape(-1)
    else:
        raise ValueError(name)
    return c / np.sqrt(np.mean(np.abs(c) ** 2))


def _message(rng, B, L, fs):
    """B random messages of L points at fs, band-limited to 0.3-3.4 kHz,
    peak about 1."""
    f = np.fft.rfftfreq(L, 1 / fs)
    band = (f >= 300) & (f <= 3400)
    spec = np.zeros((B, len(f)), complex)
    k = band.sum()
    spec[:, band] = rng.standard_normal((B, k)) + 1j * rng.standard_normal(
        (B, k))
    m = np.fft.irfft(spec, L, axis=1)
    return m / (np.max(np.abs(m), axis=1, keepdims=True) + 1e-12)


# ------------------------------------------------------------ transmitter

def _fine_linear(rng, name, beta, L):
    """B RRC-shaped symbol streams on the fine grid (OVER x SPS points per
    symbol), L points each."""
    B = len(beta)
    sp = SPS * OVER
    c = constellation(name)
    nsym = L // sp + 1
    up = np.zeros((B, nsym * sp), complex)
    up[:, ::sp] = c[rng.integers(0, len(c), (B, nsym))]
    return _fft_filter(up, rrc_taps(beta, sp))[:, :L]


def _fine_fsk(rng, gaussian, B, L):
    sp = SPS * OVER
    nsym = L // sp + 1
    bits = rng.integers(0, 2, (B, nsym)) * 2.0 - 1.0
    f = np.repeat(bits, sp, axis=1)[:, :L]
    if gaussian:
        bt = rng.uniform(0.3, 0.5, B)[:, None]
        t = (np.arange(-2 * sp, 2 * sp + 1) / sp)[None, :]
        g = np.exp(-2 * np.pi ** 2 * bt ** 2 * t ** 2 / np.log(2))
        f = _fft_filter(f.astype(complex), g / g.sum(1, keepdims=True)).real
    h = rng.uniform(0.45, 0.55, B)[:, None]
    phase = np.cumsum(f, axis=1) * np.pi * h / sp
    return np.exp(1j * (phase + rng.uniform(0, 2 * np.pi, (B, 1))))


def _fine_analog(rng, name, B, L):
    fs = SAMPLE_RATE * OVER
    m = _message(rng, B, L, fs)
    if name == "AM-DSB":
        return (1 + rng.uniform(0.2, 0.9, (B, 1)) * m).astype(complex)
    dev = rng.uniform(3000, 9000, (B, 1))
    return np.exp(1j * 2 * np.pi * dev * np.cumsum(m, axis=1) / fs)


def _fine_unknown(rng, B, L):
    """Unknown-class sources on the fine grid: kind 0 a complex tone, 1
    white noise (handled after the channel), 2 band-limited noise, 3 a
    real sine (a tone on one axis of the I/Q plane, as a sine fed to both
    channels or to one is)."""
    fs = SAMPLE_RATE * OVER
    kind = rng.integers(0, 4, B)
    t = np.arange(L)[None, :] / fs
    f0 = rng.uniform(-20000, 20000, (B, 1))
    ph = 2 * np.pi * f0 * t + rng.uniform(0, 2 * np.pi, (B, 1))
    x = np.where((kind == 3)[:, None],
                 np.cos(ph) * np.exp(1j * rng.uniform(0, 2 * np.pi, (B, 1))),
                 np.exp(1j * ph))
    bl = kind == 2
    if bl.any():
        n = int(bl.sum())
        f = np.fft.fftfreq(L, 1 / fs)[None, :]
        bw = rng.uniform(1000, 30000, (n, 1))
        fc = rng.uniform(-16000, 16000, (n, 1))
        spec = (rng.standard_normal((n, L)) + 1j * rng.standard_normal(
            (n, L))) * (np.abs(f - fc) <= bw / 2)
        x[bl] = np.fft.ifft(spec, axis=1)
    return x, kind


def _read(fine, pos):
    """Linear interpolation of rows of fine (B, L) at fractional fine-grid
    positions pos (B, n)."""
    i = np.clip(np.floor(pos).astype(np.int64), 0, fine.shape[1] - 2)
    w = pos - i
    a = np.take_along_axis(fine, i, axis=1)
    b = np.take_along_axis(fine, i + 1, axis=1)
    return a * (1 - w) + b * w


# ------------------------------------------------------------ channel

def _clarke(rng, B, n, fd, k_lin, los):
    """Time-varying gains (B, n): sum of 16 sinusoids (Clarke / Jakes
    spectrum) at maximum Doppler fd (B,), unit mean power, plus a line of
    sight with Rician K k_lin (B,) where los (B,) is True.  Computed every
    16 samples and interpolated (fd <= a few hundred Hz: smooth there)."""
    M, step = 16, 16
    tk = np.arange(0, n + step, step) / SAMPLE_RATE          # (G,)
    alpha = rng.uniform(0, 2 * np.pi, (B, M, 1))
    phi = rng.uniform(0, 2 * np.pi, (B, M, 1))
    w = 2 * np.pi * fd[:, None, None] * np.cos(alpha)
    g = np.exp(1j * (w * tk[None, None, :] + phi)).sum(1) / np.sqrt(M)
    th = rng.uniform(0, 2 * np.pi, (B, 1))
    th0 = rng.uniform(0, 2 * np.pi, (B, 1))
    line = np.exp(1j * (2 * np.pi * fd[:, None] * np.cos(th) * tk[None, :]
                        + th0))
    kk = np.where(los, k_lin, 0.0)[:, None]
    g = np.sqrt(kk / (kk + 1)) * line + np.sqrt(1 / (kk + 1)) * g
    # linear interpolation to every sample
    pos = np.arange(n) / step
    i = np.floor(pos).astype(int)
    fr = pos - i
    return g[:, i] * (1 - fr) + g[:, i + 1] * fr


def draw(rng, B, spec):
    """Per-window parameters (dict of (B,) arrays) from spec."""
    p = {}
    p["snr_db"] = rng.integers(int(spec["snr_db"][0]),
                               int(spec["snr_db"][1]) + 1, B).astype(float)
    p["rolloff"] = _u(rng, spec["rolloff"], B)
    pf = np.asarray(spec["fading"], float)
    p["fading"] = rng.choice(3, B, p=pf / pf.sum())
    p["rician_k_db"] = _u(rng, spec["rician_k_db"], B)
    p["doppler_hz"] = _u(rng, spec["doppler_hz"], B)
    p["echo"] = rng.uniform(0, 1, B) < spec["echo_prob"]
    p["echo_db"] = _u(rng, spec["echo_db"], B)
    p["echo_delay"] = _u(rng, spec["echo_delay"], B)
    p["cfo_hz"] = _signed(rng, spec["cfo_hz"], B)
    p["phase_noise_hz"] = _u(rng, spec["phase_noise_hz"], B)
    p["sro_ppm"] = _signed(rng, spec["sro_ppm"], B)
    p["iq_gain_db"] = _signed(rng, spec["iq_gain_db"], B)
    p["iq_phase_deg"] = _signed(rng, spec["iq_phase_deg"], B)
    p["dc_dbc"] = _u(rng, spec["dc_dbc"], B)
    p["amp_db"] = _u(rng, spec["amp_db"], B)
    return p


def _generate(rng, labels, n, spec, start=None):
    """Complex windows (B, n) for labels (B,), with their parameters.
    The received signal is scaled to unit power before the noise: over
    the window, or (start given: a segment of a stream at that sample)
    over each WINDOW_SAMPLES window of the stream, so that SNR is per
    window either way."""
    B = len(labels)
    p = draw(rng, B, spec)
    sro = p["sro_ppm"] * 1e-6
    tau = rng.uniform(0, SPS, B)                      # timing, samples
    # fine-grid positions of the receiver's samples (direct path)
    base = OVER * (2 * SPAN * SPS + 4)                # clear of edges
    pos = base + OVER * (np.arange(n)[None, :] * (1 + sro[:, None]) +
                         tau[:, None])
    L = int(np.ceil(pos.max())) + OVER * (SPAN * SPS + 8)
    fine = np.empty((B, L), complex)
    kind = np.full(B, -1)
    for c in np.unique(labels):
        at = labels == c
        name = LABELS[c]
        if name in ("GFSK", "CPFSK"):
            fine[at] = _fine_fsk(rng, name == "GFSK", int(at.sum()), L)
        elif name in ("AM-DSB", "WBFM"):
            fine[at] = _fine_analog(rng, name, int(at.sum()), L)
        elif name == UNKNOWN:
            fine[at], kind[at] = _fine_unknown(rng, int(at.sum()), L)
        else:
            fine[at] = _fine_linear(rng, name, p["rolloff"][at], L)
    fine /= np.sqrt(np.mean(np.abs(fine) ** 2, axis=1, keepdims=True))

    # fading (direct path and echo), carrier offset, phase noise
    fd = p["doppler_hz"]
    k_lin = 10 ** (p["rician_k_db"] / 10)
    faded = p["fading"] > 0
    g0 = np.ones((B, n), complex)
    if faded.any():
        g0[faded] = _clarke(rng, int(faded.sum()), n, fd[faded],
                            k_lin[faded], p["fading"][faded] == 1)
    y = g0 * _read(fine, pos)
    if p["echo"].any():
        e = p["echo"]
        ge = _clarke(rng, int(e.sum()), n, fd[e], k_lin[e],
                     np.zeros(int(e.sum()), bool))
        amp = 10 ** (p["echo_db"][e] / 20)[:, None]
        y[e] += amp * ge * _read(fine[e], pos[e] - OVER * p["echo_delay"][e,
                                                                       None])
    t = np.arange(n)[None, :] / SAMPLE_RATE
    sig = np.sqrt(2 * np.pi * p["phase_noise_hz"] / SAMPLE_RATE)[:, None]
    pn = np.cumsum(sig * rng.standard_normal((B, n)), axis=1)
    y = y * np.exp(1j * (2 * np.pi * p["cfo_hz"][:, None] * t + pn +
                         rng.uniform(0, 2 * np.pi, (B, 1))))
    if start is None:
        y /= np.sqrt(np.mean(np.abs(y) ** 2, axis=1, keepdims=True)) + 1e-30
    else:
        w = (start + np.arange(n)) // WINDOW_SAMPLES
        w -= w[0]
        for b in range(B):
            ms = np.bincount(w, np.abs(y[b]) ** 2) / np.bincount(w)
            y[b] /= np.sqrt(ms[w]) + 1e-30

    # noise at the window's SNR (white noise windows: the noise alone)
    sigma = np.sqrt(10 ** (-p["snr_db"] / 10) / 2)[:, None]
    y = np.where((kind == 1)[:, None], 0.0, y)
    sigma = np.where((kind == 1)[:, None], np.sqrt(0.5), sigma)
    y = y + sigma * (rng.standard_normal((B, n)) + 1j *
                     rng.standard_normal((B, n)))

    # the receiver: I/Q imbalance, DC offset, gain
    gI = 10 ** (p["iq_gain_db"] / 40)[:, None]
    ph = np.deg2rad(p["iq_phase_deg"])[:, None] / 2
    i_, q_ = y.real, y.imag
    y = gI * (np.cos(ph) * i_ - np.sin(ph) * q_) + 1j * (
        (np.cos(ph) * q_ - np.sin(ph) * i_) / gI)
    rms = np.sqrt(np.mean(np.abs(y) ** 2, axis=1, keepdims=True))
    dc = rms * 10 ** (p["dc_dbc"] / 20)[:, None] * np.exp(
        1j * rng.uniform(0, 2 * np.pi, (B, 1)))
    y = (y + dc) * 10 ** (p["amp_db"] / 20)[:, None]
    p["kind"] = kind
    return y, p


def to_iq(x):
    """complex (..., n) -> float32 (..., n, 2): I, Q interleaved."""
    return np.stack([x.real, x.imag], axis=-1).astype(np.float32)


CHUNK = 500


def make_windows(seed, count, n_samples=WINDOW_SAMPLES, spec=None,
                 classes=None, return_params=False):
    """count windows of n_samples: (X (count, n_samples, 2) float32, labels
    (count,), snrs (count,)) [, params], balanced over classes (default
    every label, the unknown class included), impairments drawn from spec
    (default IMPAIRMENTS; a dict of overrides is merged into it)."""
    sp = dict(IMPAIRMENTS)
    sp.update(spec or {})
    rng = np.random.default_rng(seed)
    cls = np.arange(len(LABELS)) if classes is None else np.asarray(classes)
    labels = cls[np.arange(count) % len(cls)]
    rng.shuffle(labels)
    X = np.empty((count, n_samples, 2), np.float32)
    params = {}
    for s in range(0, count, CHUNK):
        y, p = _generate(rng, labels[s:s + CHUNK], n_samples, sp)
        X[s:s + CHUNK] = to_iq(y)
        for k, v in p.items():
            params.setdefault(k, []).append(v)
    params = {k: np.concatenate(v) for k, v in params.items()}
    out = (X, labels, params["snr_db"].astype(int))
    return out + (params,) if return_params else out


def make_stream(seed, segments, seg_samples, snrs=None, labels=None,
                spec=None):
    """A stream whose modulation (and SNR) change every seg_samples
    samples, each segment through its own channel (fading, offsets and
    receiver held over the segment; the SNR is that of every window of
    WINDOW_SAMPLES from the segment's start, as in make_windows): (iq
    (segments * seg_samples, 2) float32, labels (segments,), snrs
    (segments,)).
    labels / snrs, when given, fix each segment's class / SNR; otherwise
    they are drawn from the seed (modulations only)."""
    rng = np.random.default_rng(seed)
    if labels is None:
        labels = rng.integers(0, N_MOD, segments)
    labels = np.asarray(labels)
    if snrs is None:
        snrs = rng.integers(0, 21, segments)
    snrs = np.asarray(snrs)
    sp = dict(IMPAIRMENTS)
    sp.update(spec or {})
    parts = []
    for lab, snr in zip(labels, snrs):
        y, _ = _generate(rng, np.array([lab]), seg_samples,
                         dict(sp, snr_db=(int(snr), int(snr))),
                         start=len(parts) * seg_samples)
        parts.append(to_iq(y[0]))
    return np.concatenate(parts), labels, snrs
