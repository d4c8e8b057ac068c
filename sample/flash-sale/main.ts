import 'reflect-metadata';
import { Logger } from '@nestjs/common';
import { NestFactory } from '@nestjs/core';
import { AppModule } from './app.module.js';
import { flashSaleConfig, type FlashSaleConfig } from './flash-sale.config.js';

const app = await NestFactory.create(AppModule);
// SIGTERM / SIGINT close the Redis connections and the database before exiting.
app.enableShutdownHooks();
const config = app.get<FlashSaleConfig>(flashSaleConfig.KEY);
await app.listen(config.port, config.host);
new Logger('FlashSale').log(
  `${config.instance} listening on ${await app.getUrl()} (locks ${config.locks ? 'on' : 'off'})`,
);
