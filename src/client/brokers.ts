/**
 * The claim generation of a broker's delivery: a Fencing-Token for the JOB (one message), which
 * grows with every redelivery of that message and never goes back. It orders the deliveries of
 * one job, not two jobs writing one account: fence a resource many jobs share with a lease from
 * the gateway (./with-lease.ts) instead (docs/exactly-once.md, "Where the generation comes from").
 * Structural types only: the client depends on no broker library.
 */

/** NATS JetStream: `msg.info.deliveryCount` — 1 on the first delivery, one more on each redelivery. */
export function jetstreamGeneration(msg: { info: { deliveryCount: number } }): number {
  return msg.info.deliveryCount
}

/**
 * RabbitMQ quorum queues: 1 + `x-acquired-count` where the broker sends it (4.3 and later count
 * every delivery there, `x-delivery-count` only the failed ones), else 1 + `x-delivery-count`
 * (absent on a first delivery). Classic queues send neither: no generation.
 * @param headers `msg.properties.headers` (amqplib)
 */
export function rabbitmqGeneration(headers: Record<string, unknown> | undefined): number {
  const count = headers?.['x-acquired-count'] ?? headers?.['x-delivery-count'] ?? 0
  return 1 + Number(count)
}

/**
 * BullMQ: `job.attemptsStarted` — raised by the same script that takes the job's lock, on every
 * move to active (a first start, a retry, a stalled job picked up again), never on a lock
 * renewal. Not `attemptsMade` (finished attempts only) or `stalledCounter`.
 */
export function bullmqGeneration(job: { attemptsStarted: number }): number {
  return job.attemptsStarted
}
