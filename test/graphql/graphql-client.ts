/**
 * The two ways the GraphQL tests talk to an app, as a browser client would:
 * queries and mutations as JSON over HTTP POST, subscriptions over a
 * WebSocket with the graphql-ws protocol (which Apollo and Mercurius both
 * speak).
 */
import type { GraphQLFormattedError } from 'graphql';
import { createClient, type Client } from 'graphql-ws';
import WebSocket from 'ws';

export interface GraphQLResponse<T> {
  data?: T | null;
  errors?: GraphQLFormattedError[];
}

/** Thrown when the server answers something other than a GraphQL response. */
export class GraphQLTransportError extends Error {
  constructor(
    readonly status: number,
    readonly body: string,
  ) {
    super(`The GraphQL endpoint answered HTTP ${status}: ${body.slice(0, 500)}`);
    this.name = 'GraphQLTransportError';
  }
}

/** Posts one operation; resolves with its `data` and `errors`, whatever they hold. */
export async function postGraphQL<T>(
  url: string,
  query: string,
  variables: Record<string, unknown> = {},
): Promise<GraphQLResponse<T>> {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ query, variables }),
  });
  const text = await response.text();
  let body: unknown;
  try {
    body = JSON.parse(text);
  } catch {
    throw new GraphQLTransportError(response.status, text);
  }
  if (typeof body !== 'object' || body === null || !('data' in body || 'errors' in body))
    throw new GraphQLTransportError(response.status, text);
  return body as GraphQLResponse<T>;
}

/** A graphql-ws client that gives up at once instead of reconnecting: a test wants the failure. */
export function subscriptionClient(url: string): Client {
  return createClient({ url, webSocketImpl: WebSocket, retryAttempts: 0, lazy: true });
}

/**
 * One subscription read step by step. A refusal (the resolver threw) reaches
 * graphql-ws clients in one of two shapes, depending on the server: an
 * `error` message, which `next()` throws as the error list, or a single
 * `next` result carrying `errors`. `next()` turns both into a rejected
 * {@link SubscriptionRefused}.
 */
export class Subscription<T> {
  private readonly iterator: AsyncIterableIterator<GraphQLResponse<T>>;

  constructor(client: Client, query: string, variables: Record<string, unknown> = {}) {
    this.iterator = client.iterate<T>({ query, variables }) as AsyncIterableIterator<
      GraphQLResponse<T>
    >;
  }

  /** The next event's data; `undefined` once the server has completed the subscription. */
  async next(): Promise<T | undefined> {
    let step: IteratorResult<GraphQLResponse<T>>;
    try {
      step = await this.iterator.next();
    } catch (error) {
      if (Array.isArray(error)) throw new SubscriptionRefused(error as GraphQLFormattedError[]);
      throw error;
    }
    if (step.done) return undefined;
    if (step.value.errors?.length) throw new SubscriptionRefused(step.value.errors);
    return step.value.data ?? undefined;
  }

  /** Unsubscribes, as a client that leaves does. */
  async stop(): Promise<void> {
    await this.iterator.return?.();
  }
}

export class SubscriptionRefused extends Error {
  constructor(readonly errors: GraphQLFormattedError[]) {
    super(`The subscription was refused: ${errors.map((e) => e.message).join('; ')}`);
    this.name = 'SubscriptionRefused';
  }
}
