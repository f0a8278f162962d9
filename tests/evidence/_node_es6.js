// Oracle for the ES6 number-serialization test (tests/evidence/test_canonical.py).
//
// Reads lines of hex IEEE 754 bit patterns (up to 16 hex digits, big-endian) on
// stdin. An empty line ends a batch: the JSON.stringify text of every double in
// the batch is written, one per line, in order. Nothing is written before a
// batch ends, so the caller can write a whole batch and then read its answers
// without the two pipes deadlocking. Exits when stdin closes.
"use strict";

const readline = require("readline");

const view = new DataView(new ArrayBuffer(8));
let batch = [];

function toDouble(hex) {
  const bits = BigInt("0x" + hex);
  view.setBigUint64(0, bits);
  return view.getFloat64(0);
}

const lines = readline.createInterface({ input: process.stdin, crlfDelay: Infinity });
lines.on("line", (line) => {
  if (line !== "") {
    batch.push(line);
    return;
  }
  const out = new Array(batch.length);
  for (let i = 0; i < batch.length; i++) {
    out[i] = JSON.stringify(toDouble(batch[i]));
  }
  batch = [];
  process.stdout.write(out.join("\n") + "\n");
});
