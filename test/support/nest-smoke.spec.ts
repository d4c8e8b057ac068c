import 'reflect-metadata';
import { describe, expect, it } from '@jest/globals';
import { Inject, Injectable, Module } from '@nestjs/common';
import { Test } from '@nestjs/testing';

const GREETING = Symbol('GREETING');

@Injectable()
class GreeterService {
  constructor(@Inject(GREETING) private readonly greeting: string) {}

  greet(name: string): string {
    return `${this.greeting}, ${name}`;
  }
}

@Injectable()
class ConsumerService {
  // Resolved from emitDecoratorMetadata, which ts-jest must emit in transpile-only mode.
  constructor(readonly greeter: GreeterService) {}
}

@Module({
  providers: [{ provide: GREETING, useValue: 'hello' }, GreeterService, ConsumerService],
})
class GreeterModule {}

describe('NestJS under Jest ESM', () => {
  it('compiles a testing module and injects by constructor type', async () => {
    const moduleRef = await Test.createTestingModule({ imports: [GreeterModule] }).compile();
    try {
      const consumer = moduleRef.get(ConsumerService);
      expect(consumer.greeter).toBeInstanceOf(GreeterService);
      expect(consumer.greeter.greet('world')).toBe('hello, world');
    } finally {
      await moduleRef.close();
    }
  });
});
