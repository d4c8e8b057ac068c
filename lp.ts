import { LockEngine } from './lib/engine/index.js';
const nodes = (process.env.NODES ?? '7101').split(',').map((p) => `redis://127.0.0.1:${p}`);
const fencing = process.env.FENCING !== '0';
const e = new LockEngine({ nodes, fencing, logger: { warn() {}, error() {} } });
await e.connect();
let seq = 0, done = 0, stop = false;
async function worker() { while (!stop) { const l = await e.tryAcquire(`k${seq++}`); await l.release(); done++; } }
const run = async (ms: number) => { stop = false; done = 0; const c0 = process.cpuUsage(); const t0 = performance.now(); const ws = Array.from({ length: 32 }, worker); await new Promise((r) => setTimeout(r, ms)); stop = true; await Promise.all(ws); const c = process.cpuUsage(c0); const t = performance.now() - t0; return { rate: done / t * 1000, cpu: (c.user + c.system) / done }; };
await run(300);
for (let i = 0; i < 3; i++) { const r = await run(1000); console.log(`fencing=${fencing} ${Math.round(r.rate)}/s client ${r.cpu.toFixed(1)} µs/cycle`); }
await e.close();
