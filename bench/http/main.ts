/**
 * The bench's Nest app, run as a process of its own by
 * bench/support/http-app.ts after compiling it with tsc (Nest needs the
 * decorator metadata that tsx does not emit).
 *
 *   BENCH_HTTP_PLATFORM=express|fastify  BENCH_HTTP_NODES=redis://...,redis://...  (empty: no lock module)
 *   BENCH_HTTP_AP_CLIENTS=1  the engine's clients with auto-pipelining (default: without, the engine's default)
 *   BENCH_HTTP_CONTEXT_INTERCEPTOR=0  `contextInterceptor: false`, the interceptor on the locked handler only
 *
 * Listens on a free loopback port and reports it to the parent over IPC;
 * SIGTERM closes the app (and its Redis connections).
 */
import 'reflect-metadata';
import { NestFactory } from '@nestjs/core';
import { FastifyAdapter, type NestFastifyApplication } from '@nestjs/platform-fastify';
import type { INestApplication } from '@nestjs/common';
import type { AddressInfo } from 'node:net';
import { BenchAppModule } from './app.module.js';

const platform = process.env.BENCH_HTTP_PLATFORM ?? 'express';
const urls = process.env.BENCH_HTTP_NODES
  ? process.env.BENCH_HTTP_NODES.split(',').filter(Boolean)
  : undefined;
// Connection options instead of URLs override the engine's client defaults, here auto-pipelining only.
const nodes =
  urls && process.env.BENCH_HTTP_AP_CLIENTS === '1'
    ? urls.map((url) => {
        const { hostname, port } = new URL(url);
        return { host: hostname, port: Number(port), enableAutoPipelining: true };
      })
    : urls;
const module = BenchAppModule.register(
  urls,
  nodes,
  process.env.BENCH_HTTP_CONTEXT_INTERCEPTOR !== '0',
);
const options = { logger: ['error' as const, 'warn' as const] };

const app: INestApplication =
  platform === 'fastify'
    ? await NestFactory.create<NestFastifyApplication>(module, new FastifyAdapter(), options)
    : await NestFactory.create(module, options);
await app.listen(0, '127.0.0.1');
const { port } = app.getHttpServer().address() as AddressInfo;
process.send?.({ ready: true, port, pid: process.pid });

let closing = false;
const close = () => {
  if (closing) return;
  closing = true;
  app.close().then(
    () => process.exit(0),
    () => process.exit(1),
  );
};
process.on('SIGTERM', close);
process.on('SIGINT', close);
// The bench went away without a word: do not linger.
process.on('disconnect', close);
