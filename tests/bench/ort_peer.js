#!/usr/bin/env node
// SPDX-License-Identifier: LGPL-2.1-or-later
// ONNX Runtime peer of the sattn benchmark: runs ONNX models exported by
// peers.py on the CPU execution provider with one intra-op and one
// inter-op thread, sequential execution, full graph optimisation, and
// prints one JSON object per model on stdout.
//
//   node ort_peer.js JOB.json
//
// JOB.json: {"ort": "<dir holding node_modules/onnxruntime-node>",
//            "budget": seconds per model,
//            "models": [{"name": ..., "path": "model.onnx",
//                        "shape": [dims of the one float32 input],
//                        "check_in": optional raw float32 input file,
//                        "check_out": where to write its output}]}
// Each model runs untimed for a short warm-up, then repeatedly for
// `budget` seconds on a few distinct random inputs.  Reported: runs,
// process CPU seconds (user + system, every thread of the process: the
// CPU execution provider runs inside the session's run call, on the main
// thread) and wall seconds.
'use strict';

const fs = require('fs');
const path = require('path');

async function main () {
  const job = JSON.parse(fs.readFileSync(process.argv[2], 'utf8'));
  const ort = require(path.join(job.ort, 'node_modules', 'onnxruntime-node'));
  const opts = {
    executionProviders: ['cpu'],
    intraOpNumThreads: 1,
    interOpNumThreads: 1,
    executionMode: 'sequential',
    graphOptimizationLevel: 'all'
  };
  for (const m of job.models) {
    const session = await ort.InferenceSession.create(m.path, opts);
    const inName = session.inputNames[0];
    const outName = session.outputNames[0];
    const count = m.shape.reduce((a, b) => a * b, 1);
    if (m.check_in) {
      const buf = fs.readFileSync(m.check_in);
      const x = new Float32Array(buf.buffer, buf.byteOffset, count);
      const r = await session.run({ [inName]: new ort.Tensor('float32', Float32Array.from(x), m.shape) });
      const y = r[outName].data;
      fs.writeFileSync(m.check_out, Buffer.from(y.buffer, y.byteOffset, y.byteLength));
    }
    // a few distinct inputs, normal-ish (sum of uniforms), taken in turn
    const feeds = [];
    for (let k = 0; k < 8; k++) {
      const x = new Float32Array(count);
      for (let i = 0; i < count; i++) {
        x[i] = Math.random() + Math.random() + Math.random() - 1.5;
      }
      feeds.push({ [inName]: new ort.Tensor('float32', x, m.shape) });
    }
    const warmEnd = performance.now() + 200 * Math.min(1, job.budget);
    let k = 0;
    while (performance.now() < warmEnd || k < 3) {
      await session.run(feeds[k++ % feeds.length]);
    }
    const c0 = process.cpuUsage();
    const t0 = performance.now();
    let runs = 0;
    let t = t0;
    while (t - t0 < 1000 * job.budget || runs < 3) {
      for (let j = 0; j < 8; j++) {
        await session.run(feeds[(runs + j) % feeds.length]);
      }
      runs += 8;
      t = performance.now();
    }
    const c = process.cpuUsage(c0);
    await session.release();
    process.stdout.write(JSON.stringify({
      name: m.name,
      runs,
      cpu_s: (c.user + c.system) * 1e-6,
      wall_s: (t - t0) * 1e-3
    }) + '\n');
  }
}

main().catch((e) => {
  process.stderr.write(String(e && e.stack ? e.stack : e) + '\n');
  process.exit(1);
});
