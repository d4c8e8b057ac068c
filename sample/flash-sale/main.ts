import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import type { Server } from 'node:http';
import { AppModule } from './app.module.js';
import { flashSaleConfig, type FlashSaleConfig } from './flash-sale.config.js';

const app = await NestFactory.create(AppModule);
// SIGTERM / SIGINT close the Redis connections and the database before exiting.
app.enableShutdownHooks();
const config = app.get<FlashSaleConfig>(flashSaleConfig.KEY);
// Behind a load balancer (or the demo's load, which keeps its connections open), an idle
// connection must outlive the client's: Node closes one after 5 s by default, and a request
// sent on it as it closes fails with 'socket hang up' before the app sees it.
const server = app.getHttpServer() as Server;
server.keepAliveTimeout = 65_000;
server.headersTimeout = 66_000;
await app.listen(config.port, config.host);
new Logger('FlashSale').log(
  `${config.instance} listening on ${await app.getUrl()} (locks ${config.locks ? 'on' : 'off'})`,
);
