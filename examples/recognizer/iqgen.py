#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""Complex baseband (I/Q) signals of ten modulations, for training and
evaluating the modulation recogniser (examples/recognizer/).

Every signal is generated here from a seed (numpy only; nothing is
downloaded).  The stream is 2-channel float32 I/Q at SAMPLE_RATE
(64 kHz): channel 0 = I, channel 1 = Q, interleaved, as `rawaudioparse
num-channels=2` reads it.  Digital modulations run at 8 kbaud (8 samples
per symbol).

Classes (LABELS):
  BPSK, QPSK, 8PSK, QAM16, QAM64, PAM4   linear, root-raised-cosine
                                         pulses (roll-off 0.35, 8 symbols
                                         each side)
  GFSK      Gaussian FSK, BT 0.35, modulation index 0.5
  CPFSK     continuous-phase FSK, modulation index 0.5 (rectangular)
  AM-DSB    double-sideband AM with carrier, index 0.3-0.8, a band-limited
            random message (0.3-3.4 kHz)
  WBFM      FM, peak deviation 4-8 kHz, the same kind of message

Impairments, drawn per segment:
  - timing offset: a random fraction of a symbol (the pulse train is
    built at 4x the rate and decimated at a random phase);
  - carrier frequency offset: uniform in +-1% of the sample rate
    (+-640 Hz);
  - carrier phase: uniform in [0, 2 pi);
  - a multipath channel: 3 taps at 0, 1 and 2 samples (Rician first tap,
    K = 4..20 dB, Rayleigh echoes 6 and 12 dB down), normalised to unit
    power gain;
  - AWGN at the segment's SNR (signal power 1 before the noise): SNRs
    from -10 to +20 dB.

Use: windows (N, n_samples, 2) for training (make_windows), or a stream
whose modulation and SNR change every segment (make_stream).
"""

import numpy as np

SAMPLE_RATE = 64000
SPS = 8                         # samples per symbol
LABELS = ["BPSK", "QPSK", "8PSK", "QAM16", "QAM64", "PAM4", "GFSK",
          "CPFSK", "AM-DSB", "WBFM"]
SNR_RANGE = (-10, 20)
OVER = 4                        # timing resolution: 1/OVER of a sample

# How the recogniser frames the stream: windows of FRAMES frames of
# FRAME_SAMPLES I/Q samples (frame-size on the 2-channel stream).
FRAME_SAMPLES = 16
FRAMES = 64
WINDOW_SAMPLES = FRAME_SAMPLES * FRAMES


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


def rrc(beta=0.35, span=8, sps=SPS * OVER):
    """Root-raised-cosine taps (unit energy), span symbols each side."""
    t = np.arange(-span * sps, span * sps + 1) / sps
    h = np.empty_like(t)
    for i, ti in enumerate(t):
        if abs(ti) < 1e-12:
            h[i] = 1.0 - beta + 4 * beta / np.pi
        elif abs(abs(ti) - 1 / (4 * beta)) < 1e-9:
            h[i] = (beta / np.sqrt(2)) * ((1 + 2 / np.pi) * np.sin(
                np.pi / (4 * beta)) + (1 - 2 / np.pi) * np.cos(
                np.pi / (4 * beta)))
        else:
            h[i] = (np.sin(np.pi * ti * (1 - beta)) + 4 * beta * ti * np.cos(
                np.pi * ti * (1 + beta))) / (np.pi * ti * (1 - (4 * beta * ti)
                                                            ** 2))
    return h / np.sqrt(np.sum(h ** 2))


_RRC = rrc()


def _constellation(name):
    if name == "BPSK":
        return np.array([1, -1], complex)
    if name == "QPSK":
        return np.exp(1j * (np.pi / 4 + np.pi / 2 * np.arange(4)))
    if name == "8PSK":
        return np.exp(1j * np.pi / 4 * np.arange(8))
    if name == "PAM4":
        return np.array([-3, -1, 1, 3], complex)
    if name in ("QAM16", "QAM64"):
        m = 4 if name == "QAM16" else 8
        a = np.arange(m) * 2 - (m - 1)
        return (a[:, None] + 1j * a[None, :]).reshape(-1)
    raise ValueError(name)


def _linear(rng, name, n):
    """n samples of a linearly modulated, RRC-shaped signal at a random
    timing phase (unit average power)."""
    c = _constellation(name)
    c = c / np.sqrt(np.mean(np.abs(c) ** 2))
    nsym = n // SPS + 2 * 8 + 4
    sym = c[rng.integers(0, len(c), nsym)]
    up = np.zeros(nsym * SPS * OVER, complex)
    up[::SPS * OVER] = sym
    x = np.convolve(up, _RRC, mode="same")
    start = 8 * SPS * OVER + rng.integers(0, SPS * OVER)
    x = x[start:start + n * OVER:OVER]
    return x / np.sqrt(np.mean(np.abs(x) ** 2))


def _fsk(rng, n, gaussian):
    """GFSK (BT 0.35) or CPFSK, modulation index 0.5, random timing."""
    nsym = n // SPS + 8
    bits = rng.integers(0, 2, nsym) * 2 - 1
    f = np.repeat(bits.astype(float), SPS * OVER)
    if gaussian:
        bt = 0.35
        t = np.arange(-2 * SPS * OVER, 2 * SPS * OVER + 1) / (SPS * OVER)
        g = np.exp(-2 * np.pi ** 2 * bt ** 2 * t ** 2 / np.log(2))
        f = np.convolve(f, g / g.sum(), mode="same")
    h = 0.5
    phase = np.cumsum(f) * np.pi * h / (SPS * OVER)
    start = 4 * SPS * OVER + rng.integers(0, SPS * OVER)
    return np.exp(1j * phase[start:start + n * OVER:OVER])


def _message(rng, n):
    """A random message band-limited to 0.3-3.4 kHz, peak about 1."""
    spec = np.zeros(n // 2 + 1, complex)
    f = np.fft.rfftfreq(n, 1 / SAMPLE_RATE)
    band = (f >= 300) & (f <= 3400)
    spec[band] = (rng.standard_normal(band.sum()) + 1j *
                  rng.standard_normal(band.sum()))
    m = np.fft.irfft(spec, n)
    return m / (np.max(np.abs(m)) + 1e-12)


def _analog(rng, name, n):
    m = _message(rng, n)
    if name == "AM-DSB":
        x = (1 + rng.uniform(0.3, 0.8) * m).astype(complex)
    else:
        dev = rng.uniform(4000, 8000)
        x = np.exp(1j * 2 * np.pi * dev * np.cumsum(m) / SAMPLE_RATE)
    return x / np.sqrt(np.mean(np.abs(x) ** 2))


def modulate(rng, label, n):
    """n clean samples of modulation label (unit power)."""
    name = LABELS[label]
    if name in ("GFSK", "CPFSK"):
        return _fsk(rng, n, name == "GFSK")
    if name in ("AM-DSB", "WBFM"):
        return _analog(rng, name, n)
    return _linear(rng, name, n)


def channel(rng, x, snr_db):
    """Multipath, carrier offset and phase, then AWGN at snr_db."""
    k = 10 ** (rng.uniform(4, 20) / 10)
    taps = np.array([np.sqrt(k / (k + 1)) + np.sqrt(1 / (k + 1) / 2) *
                     (rng.standard_normal() + 1j * rng.standard_normal()),
                     10 ** (-6 / 20) * (rng.standard_normal() + 1j *
                                       rng.standard_normal()) / np.sqrt(2)
                     / np.sqrt(k + 1),
                     10 ** (-12 / 20) * (rng.standard_normal() + 1j *
                                        rng.standard_normal()) / np.sqrt(2)
                     / np.sqrt(k + 1)])
    taps /= np.sqrt(np.sum(np.abs(taps) ** 2))
    y = np.convolve(x, taps)[:len(x)]
    n = np.arange(len(x))
    cfo = rng.uniform(-0.01, 0.01)
    y = y * np.exp(1j * (2 * np.pi * cfo * n + rng.uniform(0, 2 * np.pi)))
    y = y / np.sqrt(np.mean(np.abs(y) ** 2))
    sigma = np.sqrt(10 ** (-snr_db / 10) / 2)
    return y + sigma * (rng.standard_normal(len(x)) + 1j *
                        rng.standard_normal(len(x)))


def to_iq(x):
    """complex (n,) -> float32 (n, 2): I, Q interleaved."""
    return np.stack([x.real, x.imag], axis=-1).astype(np.float32)


def make_windows(seed, count, n_samples, snr_range=SNR_RANGE):
    """count windows of n_samples: (X (count, n_samples, 2) float32, labels
    (count,), snrs (count,)), balanced over classes, SNRs uniform in
    snr_range (whole dB)."""
    rng = np.random.default_rng(seed)
    labels = np.arange(count) % len(LABELS)
    rng.shuffle(labels)
    snrs = rng.integers(snr_range[0], snr_range[1] + 1, count)
    X = np.empty((count, n_samples, 2), np.float32)
    for i in range(count):
        X[i] = to_iq(channel(rng, modulate(rng, labels[i], n_samples),
                             snrs[i]))
    return X, labels, snrs


def make_stream(seed, segments, seg_samples, snrs=None, labels=None):
    """A stream whose modulation (and SNR) change every seg_samples
    samples: (iq (segments * seg_samples, 2) float32, labels (segments,),
    snrs (segments,)).  labels / snrs, when given, fix each segment's
    class / SNR; otherwise they are drawn from the seed."""
    rng = np.random.default_rng(seed)
    if labels is None:
        labels = rng.integers(0, len(LABELS), segments)
    labels = np.asarray(labels)
    if snrs is None:
        snrs = rng.integers(0, 21, segments)
    parts = [to_iq(channel(rng, modulate(rng, lab, seg_samples), snr))
             for lab, snr in zip(labels, snrs)]
    return np.concatenate(parts), labels, np.asarray(snrs)
