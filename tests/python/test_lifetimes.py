#!/usr/bin/python3
# SPDX-License-Identifier: LGPL-2.1-or-later
"""No sequence of Python calls on sattn's objects may crash the process.

Each case runs in a child process (a crash is its exit status, not this
test's): copies of a Model used after the original is gone, both copies
collected, deep copies, a pickle round trip and a pickle loaded in
another process (a Model from a file pickles as its file; one built from
arrays is refused with SattnError), __del__ called by hand while a Stream
holds the model, Streams copied or pickled (refused), a Stream outliving
every name of its Model.  Under ASan (make test-asan) a use after free or
a double free is an error report and a non-zero exit.
"""
import os
import subprocess
import sys
import tempfile
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PRELUDE = textwrap.dedent("""
    import copy, gc, os, pickle, sys
    import numpy as np
    import sattn
    from common import write_safetensors
    rng = np.random.RandomState(0)
    E = 8
    def from_file(path):
        t = {"in_proj_weight": rng.randn(3 * E, E), "in_proj_bias": rng.randn(3 * E),
             "out_proj.weight": rng.randn(E, E), "out_proj.bias": rng.randn(E)}
        write_safetensors(path, t, {"num_heads": "2"})
        return sattn.Model.from_safetensors(path)
    def use(m):
        s = sattn.Stream(m, window=8, hop=4)
        rows, _ = s.push(np.random.RandomState(1).randn(16, E).astype(np.float32))
        assert rows.shape == (16, m.d_out) and np.isfinite(rows).all()
        return rows
""")


def child(body, tmp):
    code = PRELUDE + "PATH = %r\n" % os.path.join(tmp, "m.safetensors") + \
        textwrap.dedent(body) + "\nprint('DONE')\n"
    env = dict(os.environ)
    env["PYTHONPATH"] = HERE + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True,
                       text=True, timeout=60, env=env)
    return r


class Lifetimes(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.tmp.cleanup()

    def ok(self, name, body):
        r = child(body, self.tmp.name)
        print("%-52s exit %d" % (name, r.returncode))
        self.assertEqual(r.returncode, 0, "%s: %s" % (name, r.stderr[-2000:]))
        self.assertIn("DONE", r.stdout)

    def test_copies(self):
        self.ok("copy.copy, del the original, use the copy", """
            m = sattn.Model(E, 2); c = copy.copy(m); del m; gc.collect(); use(c)
        """)
        self.ok("both copies collected", """
            m = sattn.Model(E, 2); c = copy.copy(m); d = copy.deepcopy(m)
            del m, c; gc.collect(); use(d); del d; gc.collect()
        """)
        self.ok("a file model's copy", """
            m = from_file(PATH); c = copy.copy(m); del m; gc.collect(); use(c)
        """)

    def test_pickles(self):
        self.ok("pickle round trip of a file model, del the original", """
            m = from_file(PATH); want = use(m)
            p = pickle.loads(pickle.dumps(m)); del m; gc.collect()
            assert (use(p) == want).all()
        """)
        self.ok("a pickle loaded in another process", """
            m = from_file(PATH); blob = pickle.dumps(m); want = use(m)
            import subprocess
            code = ("import pickle, sys, numpy as np, sattn; "
                    "m = pickle.loads(sys.stdin.buffer.read()); "
                    "s = sattn.Stream(m, window=8, hop=4); "
                    "print(m.d_out)")
            r = subprocess.run([sys.executable, "-c", code], input=blob,
                               capture_output=True, timeout=60)
            assert r.returncode == 0, r.stderr
            assert r.stdout.strip() == str(m.d_out).encode()
        """)
        self.ok("an array model refuses to pickle", """
            m = sattn.Model(E, 2)
            try:
                pickle.dumps(m)
            except sattn.SattnError as e:
                assert "cannot be pickled" in str(e)
            else:
                raise AssertionError("pickled")
            use(m)
        """)

    def test_streams(self):
        self.ok("m.__del__() by hand while a Stream holds it", """
            m = sattn.Model(E, 2); s = sattn.Stream(m, window=8, hop=4)
            try:
                m.__del__()
            except AttributeError:
                pass
            del m; gc.collect()
            rows, _ = s.push(rng.randn(8, E).astype(np.float32))
            assert np.isfinite(rows).all()
        """)
        self.ok("a Stream outlives every name of its Model", """
            s = sattn.Stream(sattn.Model(E, 2), window=8, hop=4)
            gc.collect(); s.push(rng.randn(8, E).astype(np.float32))
        """)
        self.ok("Streams refuse copy, deepcopy and pickle", """
            s = sattn.Stream(sattn.Model(E, 2), window=8, hop=4)
            for f in (copy.copy, copy.deepcopy, pickle.dumps):
                try:
                    f(s)
                except sattn.SattnError as e:
                    assert "Stream cannot be" in str(e), e
                else:
                    raise AssertionError(f)
            s.push(rng.randn(8, E).astype(np.float32))
        """)


FUZZ = textwrap.dedent("""
    import random
    def episode(seed):
        r = random.Random(seed)
        models, streams = [], []
        for step in range(12):
            op = r.randrange(9)
            if op == 0 or not models:
                models.append(from_file(PATH) if r.random() < 0.5
                              else sattn.Model(E, 2))
            elif op == 1:
                models.append(r.choice([copy.copy, copy.deepcopy])(
                    r.choice(models)))
            elif op == 2:
                m = r.choice(models)
                try:
                    models.append(pickle.loads(pickle.dumps(m)))
                except sattn.SattnError:
                    assert m._source is None
            elif op == 3:
                del models[r.randrange(len(models))]
            elif op == 4:
                gc.collect()
            elif op == 5:
                streams.append(sattn.Stream(r.choice(models), window=8, hop=4))
            elif op == 6 and streams:
                s = r.choice(streams)
                rows, _ = s.push(np.random.RandomState(step).randn(
                    r.randrange(0, 20), E).astype(np.float32))
                assert np.isfinite(rows).all()
            elif op == 7 and streams:
                try:
                    r.choice([copy.copy, pickle.dumps])(r.choice(streams))
                    raise AssertionError("a Stream was copied")
                except sattn.SattnError:
                    pass
            elif op == 8:
                m = r.choice(models)
                try:
                    m.__del__()
                except AttributeError:
                    pass
        del models
        gc.collect()
        for s in streams:        # every stream still works
            s.push(np.ones((4, E), np.float32))
    FIRST, N = int(sys.argv[1]), int(sys.argv[2])
    for seed in range(FIRST, FIRST + N):
        episode(seed)
""")


class LifetimeFuzz(unittest.TestCase):
    """Seeded random sequences of copies, deep copies, pickles, deletions,
    collections, streams, pushes, refused stream copies and __del__ calls
    (SATTN_LIFETIME_EPISODES, default 400, in children of 50 episodes):
    a crash names the batch's seeds."""

    def test_random_sequences(self):
        total = int(os.environ.get("SATTN_LIFETIME_EPISODES", "400"))
        with tempfile.TemporaryDirectory() as tmp:
            for first in range(1, total + 1, 50):
                n = min(50, total + 1 - first)
                code = PRELUDE + "PATH = %r\n" % os.path.join(
                    tmp, "m.safetensors") + FUZZ
                env = dict(os.environ)
                env["PYTHONPATH"] = HERE + os.pathsep + env.get(
                    "PYTHONPATH", "")
                r = subprocess.run([sys.executable, "-c", code, str(first),
                                    str(n)], capture_output=True, text=True,
                                   timeout=300, env=env)
                self.assertEqual(r.returncode, 0, "seeds %d..%d: exit %d: %s"
                                 % (first, first + n - 1, r.returncode,
                                    r.stderr[-2000:]))
        print("lifetime fuzz: %d episodes of 12 operations, every child "
              "exited 0" % total)


if __name__ == "__main__":
    unittest.main(verbosity=2)
