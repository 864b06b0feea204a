#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""A SECOND generator of I/Q windows, for EVALUATION ONLY: it never
trains anything.  Written apart from iqgen.py (the training generator) and
sharing no code with it: it imports nothing from it, and its symbol
source, pulse shaping, resampling, fading, phase noise and message
sources are other algorithms (numpy's legacy RandomState and scipy.signal
instead of numpy's Generator and hand-made FFT filters).  What the two
share is the task: the same ten class names, 64 kHz 2-channel I/Q,
8 kbaud, windows of 1024 samples.

                      iqgen.py (training)          evalgen.py (this file)
  symbols             Generator.integers           a PRBS-23 LFSR, Gray-mapped
  pulse shaping       closed-form RRC taps, FFT    RRC from its spectrum
                      convolution at 32/symbol     (frequency sampling),
                                                   scipy upfirdn at 40/symbol
  receiver instants   linear interpolation on the  cubic (Catmull-Rom) on the
                      4x grid                      5x grid
  GFSK / CPFSK        Gaussian filter of the       erf frequency pulse /
                      frequency train, cumsum      per-symbol linear phase
  messages (AM, FM)   FFT band-limited noise       3-8 random tones, or an
                                                   AR noise through a
                                                   Butterworth band-pass
  fading              16-sinusoid Clarke model     Gaussian noise through a
                                                   Doppler-shaping FIR at
                                                   2 kHz, resample_poly up
  multipath           one echo, linear interp.     2-3 taps, exponential
                                                   profile, windowed-sinc
                                                   fractional delays
  phase noise         Wiener                       leaky-integrated noise
  I/Q imbalance       split between I and Q        all in the Q branch
  noise               Generator.standard_normal    RandomState.randn

Ranges (per window, uniform): SNR -10 ... +20 dB; roll-off 0.2 ... 0.5;
fading none / Rician (K 2 ... 12 dB) / Rayleigh, thirds, Doppler 0 ... 50
Hz; 2 or 3 multipath taps (exponential, delay spread 0.3 ... 1.5 samples)
in half the windows; CFO +-800 Hz; phase-noise linewidth 0 ... 5 Hz;
sample-rate offset +-300 ppm; I/Q gain +-0.8 dB, phase +-4 degrees; DC
-40 ... -20 dBc; amplitude -40 ... +40 dB.  AM index 0.25 ... 0.85, FM
deviation 4 ... 8 kHz, GFSK BT 0.3 / 0.35 / 0.5, FSK index 0.5.

Also the signals no class covers (make_other): tones, silence, white
noise, and three kinds the recogniser never saw in training: OFDM, AM-SSB
and linear chirps.
"""

import numpy as np
from scipy import signal
from scipy.special import erf

FS = 64000
BAUD = 8000
N_SPS = FS // BAUD                  # 8
UP = 5                              # the fine grid: 5 points per sample
NAMES = ["BPSK", "QPSK", "8PSK", "QAM16", "QAM64", "PAM4", "GFSK", "CPFSK",
         "AM-DSB", "WBFM"]
OTHERS = ["tone", "silence", "noise", "OFDM", "AM-SSB", "chirp"]
WINDOW = 1024


class PRBS:
    """PRBS-23 (x^23 + x^18 + 1), seeded state: a stream of bits."""

    def __init__(self, rs):
        self.state = int(rs.randint(1, 1 << 23))

    def bits(self, n):
        out = np.empty(n, np.int64)
        s = self.state
        for i in range(n):
            b = ((s >> 22) ^ (s >> 17)) & 1
            s = ((s << 1) | b) & ((1 << 23) - 1)
            out[i] = b
        self.state = s
        return out


def _gray(k):
    return k ^ (k >> 1)


def _symbols(name, bits):
    """Gray-mapped symbols (unit mean power) from a bit array."""
    if name == "BPSK":
        return 1.0 - 2.0 * bits.astype(float)
    if name in ("QPSK", "8PSK"):
        m = 2 if name == "QPSK" else 3
        b = bits[:len(bits) // m * m].reshape(-1, m)
        k = b.dot(1 << np.arange(m)[::-1])
        off = np.pi / 4 if name == "QPSK" else 0.0
        return np.exp(1j * (2 * np.pi * _gray(k) / (1 << m) + off))
    if name == "PAM4":
        b = bits[:len(bits) // 2 * 2].reshape(-1, 2)
        lev = np.array([-3.0, -1.0, 3.0, 1.0])      # Gray order
        return lev[b[:, 0] * 2 + b[:, 1]] / np.sqrt(5.0)
    if name in ("QAM16", "QAM64"):
        m = 2 if name == "QAM16" else 3
        b = bits[:len(bits) // (2 * m) * 2 * m].reshape(-1, 2 * m)
        w = 1 << np.arange(m)[::-1]
        gi, gq = b[:, :m].dot(w), b[:, m:].dot(w)
        # level l of a Gray code: the inverse Gray of the index
        inv = np.zeros(1 << m, int)
        for v in range(1 << m):
            inv[_gray(v)] = v
        li = 2 * inv[gi] - ((1 << m) - 1)
        lq = 2 * inv[gq] - ((1 << m) - 1)
        norm = np.sqrt(2 * ((1 << m) ** 2 - 1) / 3.0)
        return (li + 1j * lq) / norm
    raise ValueError(name)


def rrc_from_spectrum(beta, sps, span=10):
    """RRC taps by frequency sampling: the square root of the raised-cosine
    spectrum on a fine grid, inverse FFT, centred, truncated to span
    symbols each side, unit energy."""
    nfft = 1 << 16
    f = np.abs(np.fft.fftfreq(nfft, 1.0 / sps))     # in units of the baud
    lo, hi = (1 - beta) / 2, (1 + beta) / 2
    H = np.where(f <= lo, 1.0, 0.0)
    band = (f > lo) & (f < hi)
    H[band] = np.sqrt(0.5 * (1 + np.cos(np.pi / beta * (f[band] - lo))))
    h = np.fft.fftshift(np.real(np.fft.ifft(H)))
    c = nfft // 2
    h = h[c - span * sps:c + span * sps + 1]
    return h / np.sqrt(np.sum(h ** 2))


def _cubic(x, t):
    """Catmull-Rom interpolation of x at fractional indices t."""
    i = np.floor(t).astype(int)
    u = t - i
    i = np.clip(i, 1, len(x) - 3)
    p0, p1, p2, p3 = x[i - 1], x[i], x[i + 1], x[i + 2]
    return 0.5 * ((2 * p1) + (-p0 + p2) * u +
                  (2 * p0 - 5 * p1 + 4 * p2 - p3) * u ** 2 +
                  (-p0 + 3 * p1 - 3 * p2 + p3) * u ** 3)


def _message(rs, n, fs):
    """A voice-band message (peak 1): 3-8 random tones, or AR(2) noise
    through a 4th-order Butterworth band-pass 300-3400 Hz."""
    t = np.arange(n) / fs
    if rs.rand() < 0.5:
        k = rs.randint(3, 9)
        f = rs.uniform(300, 3400, k)
        a = rs.uniform(0.2, 1.0, k)
        m = (a[:, None] * np.cos(2 * np.pi * f[:, None] * t[None, :] +
                                 rs.uniform(0, 2 * np.pi, (k, 1)))).sum(0)
    else:
        e = rs.randn(n + 2000)
        ar = signal.lfilter([1.0], [1.0, -1.6, 0.8], e)
        b, a = signal.butter(4, [300, 3400], btype="bandpass", fs=fs)
        m = signal.lfilter(b, a, ar)[2000:]
    return m / (np.abs(m).max() + 1e-12)


def _fine_signal(rs, name, nfine, fs_fine, beta):
    """A class's clean baseband on the fine grid (fs_fine = UP x FS)."""
    sps = N_SPS * UP                                    # 40 per symbol
    nsym = nfine // sps + 30
    if name in ("GFSK", "CPFSK"):
        d = 1.0 - 2.0 * PRBS(rs).bits(nsym)
        h = 0.5
        if name == "CPFSK":
            # phase rises or falls by pi h over each symbol, linearly
            ends = np.concatenate([[0.0], np.cumsum(d)]) * np.pi * h
            u = np.arange(nsym * sps) / sps
            k = np.floor(u).astype(int)
            ph = ends[k] + (u - k) * d[k] * np.pi * h
        else:
            bt = [0.3, 0.35, 0.5][rs.randint(3)]
            tt = (np.arange(-3 * sps, 3 * sps) + 0.5) / sps
            s = np.sqrt(np.log(2)) / (2 * np.pi * bt)
            g = 0.5 * (erf((tt + 0.5) / (np.sqrt(2) * s)) -
                       erf((tt - 0.5) / (np.sqrt(2) * s)))
            freq = signal.upfirdn(g, d, sps)
            ph = np.cumsum(freq) * np.pi * h / sps
        ph = ph[:nfine]
        return np.exp(1j * (ph + rs.uniform(0, 2 * np.pi)))
    if name in ("AM-DSB", "WBFM"):
        m = _message(rs, nfine, fs_fine)
        if name == "AM-DSB":
            return (1 + rs.uniform(0.25, 0.85) * m).astype(complex)
        dev = rs.uniform(4000, 8000)
        return np.exp(2j * np.pi * dev * np.cumsum(m) / fs_fine)
    bits_per = {"BPSK": 1, "QPSK": 2, "8PSK": 3, "PAM4": 2, "QAM16": 4,
                "QAM64": 6}[name]
    sym = _symbols(name, PRBS(rs).bits(nsym * bits_per))
    h = rrc_from_spectrum(beta, sps)
    x = signal.upfirdn(h, sym, sps)
    c = len(h) // 2
    return x[c + 10 * sps:c + 10 * sps + nfine].astype(complex)


def _fading(rs, n, fd, kind, k_db):
    """Gains (n,) at FS: Rayleigh noise shaped by a Jakes Doppler FIR at
    2 kHz, brought up with resample_poly; a Rician line of sight added."""
    if kind == 0:
        return np.ones(n, complex)
    low = 2000
    m = n * low // FS + 64
    w = (rs.randn(m + 400) + 1j * rs.randn(m + 400)) / np.sqrt(2)
    if fd > 0.5:
        # frequency-sampled Jakes spectrum sqrt((1 - (f/fd)^2)^-1/2)
        nt = 255
        f = np.fft.fftfreq(1024, 1.0 / low)
        S = np.zeros(1024)
        ins = np.abs(f) < fd * 0.999
        S[ins] = (1 - (f[ins] / fd) ** 2) ** -0.25
        h = np.fft.fftshift(np.real(np.fft.ifft(S)))[512 - nt // 2:
                                                     512 + nt // 2 + 1]
        h *= np.hanning(nt)
        h /= np.sqrt(np.sum(h ** 2))
        g = signal.lfilter(h, [1.0], w)[400:]
    else:
        g = np.full(m, w[0])
    g = signal.resample_poly(g, FS // low, 1)[:n]
    g /= np.sqrt(np.mean(np.abs(g) ** 2)) + 1e-12
    if kind == 1:
        k = 10 ** (k_db / 10)
        t = np.arange(n) / FS
        los = np.exp(1j * (2 * np.pi * fd * np.cos(rs.uniform(0, 2 * np.pi))
                           * t + rs.uniform(0, 2 * np.pi)))
        g = np.sqrt(k / (k + 1)) * los + np.sqrt(1 / (k + 1)) * g
    return g


def _frac_delay(x, d, taps=31):
    """x delayed by d samples (windowed sinc)."""
    k = np.arange(taps) - taps // 2
    h = np.sinc(k - (d - np.floor(d))) * np.blackman(taps)
    y = np.convolve(x, h / h.sum(), mode="same")
    s = int(np.floor(d))
    return np.concatenate([np.zeros(s, complex), y[:len(y) - s]])


def _receiver(rs, y, snr_db, p):
    """Channel after the transmitter: the window scaled to unit power,
    AWGN at snr_db, I/Q imbalance, DC, gain."""
    n = len(y)
    y = y / (np.sqrt(np.mean(np.abs(y) ** 2)) + 1e-30)
    s = np.sqrt(10 ** (-snr_db / 10) / 2)
    y = y + s * (rs.randn(n) + 1j * rs.randn(n))
    g = 10 ** (p["iq_gain_db"] / 20)
    ph = np.deg2rad(p["iq_phase_deg"])
    y = y.real + 1j * g * (y.imag * np.cos(ph) + y.real * np.sin(ph))
    dc = 10 ** (p["dc_dbc"] / 20) * np.sqrt(np.mean(np.abs(y) ** 2))
    y = y + dc * np.exp(1j * rs.uniform(0, 2 * np.pi))
    return y * 10 ** (p["amp_db"] / 20)


def _draw(rs):
    return dict(beta=rs.uniform(0.2, 0.5), fading=rs.randint(3),
                k_db=rs.uniform(2, 12), fd=rs.uniform(0, 50),
                multipath=rs.rand() < 0.5, spread=rs.uniform(0.3, 1.5),
                cfo=rs.uniform(-800, 800), pn_hz=rs.uniform(0, 5),
                sro=rs.uniform(-300e-6, 300e-6),
                iq_gain_db=rs.uniform(-0.8, 0.8),
                iq_phase_deg=rs.uniform(-4, 4),
                dc_dbc=rs.uniform(-40, -20), amp_db=rs.uniform(-40, 40))


def _channel(rs, fine, n, p):
    """Fine-grid signal -> n received samples through multipath, fading,
    CFO, phase noise and the receiver clock."""
    t0 = rs.uniform(0, N_SPS) + 40                      # timing, samples
    inst = (t0 + np.arange(n) * (1 + p["sro"])) * UP
    x = _cubic(fine, inst)
    if p["multipath"]:
        ntap = rs.randint(2, 4)
        y = x.copy()
        for k in range(1, ntap):
            d = k * p["spread"]
            a = np.exp(-d / p["spread"] / 1.2) * (rs.randn() + 1j *
                                                    rs.randn()) / np.sqrt(2)
            y += a * _frac_delay(x, d)
        x = y
    x = x * _fading(rs, n, p["fd"], p["fading"], p["k_db"])
    t = np.arange(n) / FS
    # phase noise: white noise through a leaky integrator (pole 0.9995)
    sig = np.sqrt(2 * np.pi * p["pn_hz"] / FS)
    pn = signal.lfilter([sig], [1.0, -0.9995], rs.randn(n))
    return x * np.exp(1j * (2 * np.pi * p["cfo"] * t + pn +
                            rs.uniform(0, 2 * np.pi)))


def window(rs, label, snr_db, n=WINDOW):
    """One received window (complex (n,)) of class label (an index into
    NAMES) at snr_db, with freshly drawn impairments."""
    p = _draw(rs)
    nfine = (n + 60) * UP
    fine = _fine_signal(rs, NAMES[label], nfine, FS * UP, p["beta"])
    return _receiver(rs, _channel(rs, fine, n, p), snr_db, p)


def make_windows(seed, count, n=WINDOW, snr_range=(-10, 20)):
    """count windows: (X (count, n, 2) float32, labels, snrs), balanced
    over the ten classes, SNRs uniform (whole dB)."""
    rs = np.random.RandomState(seed)
    labels = np.arange(count) % len(NAMES)
    rs.shuffle(labels)
    snrs = rs.randint(snr_range[0], snr_range[1] + 1, count)
    X = np.empty((count, n, 2), np.float32)
    for i in range(count):
        y = window(rs, labels[i], snrs[i], n)
        X[i, :, 0], X[i, :, 1] = y.real, y.imag
    return X, labels, snrs


def other(rs, kind, snr_db, n=WINDOW):
    """A window of a signal no class covers: tone, silence, noise, OFDM,
    AM-SSB or chirp (with the same channel and receiver as window())."""
    p = _draw(rs)
    t = np.arange(n) / FS
    if kind == "silence":
        return np.zeros(n, complex)
    if kind == "noise":
        return (rs.randn(n) + 1j * rs.randn(n)) * 10 ** (p["amp_db"] / 20) \
            / np.sqrt(2)
    if kind == "tone":
        x = np.exp(2j * np.pi * rs.uniform(-20000, 20000) * t)
    elif kind == "chirp":
        f0, f1 = rs.uniform(-24000, 24000, 2)
        dur = rs.uniform(0.004, 0.05)                  # sweep period, s
        tt = (t + rs.uniform(0, dur)) % dur
        x = np.exp(2j * np.pi * (f0 * tt + (f1 - f0) * tt ** 2 / (2 * dur)))
    elif kind == "OFDM":
        nsc = [64, 128, 256][rs.randint(3)]            # FFT size
        used = rs.randint(nsc // 4, nsc * 3 // 4)
        cp = nsc // 4
        nsym = n // (nsc + cp) + 2
        qam = [4, 16][rs.randint(2)]
        m = int(np.sqrt(qam))
        lev = 2 * np.arange(m) - (m - 1)
        d = lev[rs.randint(m, size=(nsym, used))] + 1j * lev[
            rs.randint(m, size=(nsym, used))]
        F = np.zeros((nsym, nsc), complex)
        idx = np.arange(-(used // 2), used - used // 2) % nsc
        F[:, idx] = d
        s = np.fft.ifft(F, axis=1)
        x = np.concatenate([s[:, -cp:], s], axis=1).reshape(-1)
        x = x[rs.randint(nsc + cp):][:n]
    elif kind == "AM-SSB":
        m = _message(rs, n + 400, FS)
        a = signal.hilbert(m)                          # m + j H{m}
        x = (a if rs.rand() < 0.5 else np.conj(a))[200:200 + n]
        x = x * np.exp(2j * np.pi * rs.uniform(-800, 800) * t)
    else:
        raise ValueError(kind)
    x = x * _fading(rs, n, p["fd"], p["fading"], p["k_db"])
    return _receiver(rs, x, snr_db, p)


def make_others(seed, kind, count, n=WINDOW, snr_range=(10, 20)):
    """count windows of one other kind: X (count, n, 2) float32."""
    rs = np.random.RandomState(seed)
    X = np.empty((count, n, 2), np.float32)
    for i in range(count):
        y = other(rs, kind, rs.randint(snr_range[0], snr_range[1] + 1), n)
        X[i, :, 0], X[i, :, 1] = y.real, y.imag
    return X
