import { Injectable } from '@nestjs/common';
import { randomBytes } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';

/**
 * Stands in for a payment provider's API. The call takes time, as a real one
 * does, and that gap between reading the stock and writing the sale is what
 * lets two buyers take the last unit when nothing serializes them.
 */
@Injectable()
export class PaymentsService {
  /** Charges the customer; resolves with the provider's payment reference. */
  async charge(reference: string, latencyMs: number): Promise<string> {
    await sleep(latencyMs);
    return `pay_${reference}_${randomBytes(4).toString('hex')}`;
  }
}
