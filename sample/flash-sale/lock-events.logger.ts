import { Injectable, Logger, type OnModuleInit } from '@nestjs/common';
import { LockService } from 'nestjs-redis-lock';

/**
 * Logs what an operator wants to know about locks: one lost while its work
 * ran, and one whose release found it already gone from the nodes (its lease
 * ran out while the process was stalled, so the work it covered may have
 * overlapped another holder's; fenced writes are what keeps that harmless).
 */
@Injectable()
export class LockEventsLogger implements OnModuleInit {
  private readonly logger = new Logger('Locks');

  constructor(private readonly locks: LockService) {}

  onModuleInit(): void {
    this.locks.on('lost', ({ lock, error }) =>
      this.logger.warn(
        `lost ${lock.resources.join(', ')} (fencing token ${lock.token}): ${error.message}`,
      ),
    );
    this.locks.on('released', ({ lock, result, held }) => {
      if (result.released || result.failures.length > 0) return;
      this.logger.warn(
        `released ${lock.resources.join(', ')} (fencing token ${lock.token}) after ${Math.round(held)} ms, ` +
          `but its ${lock.ttl} ms lease had already run out on the nodes`,
      );
    });
  }
}
