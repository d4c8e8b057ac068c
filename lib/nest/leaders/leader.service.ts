import { Inject, Injectable, type BeforeApplicationShutdown } from '@nestjs/common';
import { LeaderElection, type LeaderElectionOptions } from '../../engine/index.js';
import { LockService } from '../module/lock.service.js';

/**
 * Leader elections for a Nest application: one leader among the instances
 * that run an election of the same name, with its epoch (fencing token) and
 * callbacks when it is elected and retired. Every election this service
 * started steps down when the application shuts down, before the lock
 * service closes, so that another instance takes over within a round trip
 * instead of after the lease.
 *
 * Add it to the providers of a module that sees LockService.
 *
 * @example
 * @Injectable()
 * export class BillingWorker implements OnApplicationBootstrap {
 *   constructor(private readonly leaders: LeaderService) {}
 *
 *   onApplicationBootstrap() {
 *     this.leaders.lead('billing-worker', {
 *       onElected: (term) => this.run(term.epoch, term.signal),
 *     });
 *   }
 * }
 */
@Injectable()
export class LeaderService implements BeforeApplicationShutdown {
  private readonly elections = new Set<LeaderElection>();

  // Named, not read from decorator metadata: not every compiler that builds or runs an app emits it.
  constructor(@Inject(LockService) private readonly locks: LockService) {}

  /**
   * Starts contending for leadership of `name` (see {@link LeaderElection}).
   * Several elections of different names may run side by side.
   */
  lead(name: string, options?: LeaderElectionOptions): LeaderElection {
    const election = new LeaderElection(this.locks, name, options);
    this.elections.add(election);
    // One closed before the shutdown needs no step-down then.
    void election.finished.then(() => this.elections.delete(election));
    return election;
  }

  /**
   * Runs before the shutdown hooks that close LockService (Nest calls every
   * beforeApplicationShutdown first), while the nodes are still reachable.
   */
  async beforeApplicationShutdown(): Promise<void> {
    const elections = [...this.elections];
    this.elections.clear();
    await Promise.all(elections.map((election) => election.close()));
  }
}
