/**
 * The advised lease of `fencegate leases` written as each broker's own setting: a queue that
 * hands out jobs already holds the lease (its redelivery timer) and the claim generation (its
 * delivery count), so the advice is only useful in the words its config takes.
 *
 * Sources: NATS JetStream consumer configuration (`ack_wait`, nanoseconds in the API; `msg.working()`
 * resets the timer); RabbitMQ's delivery acknowledgement timeout (`consumer_timeout`, ms, evaluated
 * about once a minute, values below one minute unsupported; per queue and per consumer
 * `x-consumer-timeout` from 3.12) and its heartbeat guide (a peer is considered gone after two
 * missed heartbeats); BullMQ worker options (`lockDuration`, `lockRenewTime`, default half the
 * lockDuration; `stalledInterval`); Amazon SQS visibility timeout (0 s to 12 h,
 * `ChangeMessageVisibility` extends it) and AWS's Lambda guidance: a visibility timeout of at least
 * 6 × the function timeout.
 */
import { formatDuration } from '../config/units.js'

export interface BrokerSetting {
  broker: 'NATS JetStream' | 'RabbitMQ' | 'BullMQ' | 'Amazon SQS'
  /** what to write, as the broker's config or client takes it */
  settings: Record<string, string | number>
  /** how the broker's lease and generation work with these values, in plain words */
  note: string
}

/** RabbitMQ evaluates consumer timeouts about once a minute and does not support shorter ones. */
const RABBITMQ_MIN_TIMEOUT_MS = 60_000
/** SQS's longest visibility timeout, 12 hours. */
const SQS_MAX_VISIBILITY_S = 43_200

/**
 * Each broker's settings for a lease of `leaseMs` renewed every `renewMs` (both ms, > 0).
 * @returns one entry per broker, in a fixed order
 */
export function brokerSettings(leaseMs: number, renewMs: number): BrokerSetting[] {
  const lease = formatDuration(leaseMs)
  const renew = formatDuration(renewMs)
  const rabbit = Math.max(leaseMs, RABBITMQ_MIN_TIMEOUT_MS)
  // a frozen worker's connection is closed after two missed heartbeats: two of them fit in the lease
  const heartbeatS = Math.max(1, Math.floor(leaseMs / 2000))
  const visibility = Math.ceil(leaseMs / 1000)
  return [
    {
      broker: 'NATS JetStream',
      settings: { ack_wait: lease, 'ack_wait (API, ns)': leaseMs * 1_000_000, 'msg.working() every': renew, max_deliver: -1 },
      note: `A pull consumer's ack_wait is the lease: unacknowledged after ${lease}, the message is delivered again. msg.working() resets the timer; call it every ${renew} while the job runs. info.deliveryCount (the consumer's num_delivered for the message) is the claim generation: send it as Fencing-Token, with the route fenced per job. JetStream takes an ack from any delivery of a message, an old one included: a worker answered 412 must not ack.`,
    },
    {
      broker: 'RabbitMQ',
      settings: { consumer_timeout: rabbit, 'x-consumer-timeout': rabbit, heartbeat: heartbeatS },
      note: `A quorum queue's x-delivery-count (absent on the first delivery) is the claim generation: send x-delivery-count + 1 as Fencing-Token (from 4.3, x-acquired-count + 1, which counts every delivery). There is no renewal: a consumer that holds a delivery past consumer_timeout (ms, rabbitmq.conf; per queue or per consumer x-consumer-timeout from 3.12) loses its channel and the message goes back. RabbitMQ checks it about once a minute and does not support less than ${formatDuration(RABBITMQ_MIN_TIMEOUT_MS)}${leaseMs < RABBITMQ_MIN_TIMEOUT_MS ? `, so ${lease} becomes ${formatDuration(rabbit)}` : ''}. A frozen worker's connection is closed after two missed heartbeats: heartbeat ${heartbeatS} s hands its deliveries back within the lease. From 4.0, quorum queues drop (or dead-letter) a message after 20 deliveries unless delivery-limit says otherwise.`,
    },
    {
      broker: 'BullMQ',
      settings: { lockDuration: leaseMs, lockRenewTime: renewMs, stalledInterval: Math.min(leaseMs, 30_000) },
      note: `The job lock is the lease (lockDuration ${lease}), renewed every lockRenewTime (${renew}; BullMQ's default is half the lockDuration); the stalled checker moves a job whose lock expired back to wait. job.attemptsStarted is the claim generation.`,
    },
    {
      broker: 'Amazon SQS',
      settings: { VisibilityTimeout: Math.min(visibility, SQS_MAX_VISIBILITY_S), 'ChangeMessageVisibility every': renew },
      note: `The visibility timeout (seconds, at most 12 h) is the lease; ChangeMessageVisibility extends it while the job runs. ApproximateReceiveCount stands for the claim generation (AWS calls it approximate). When the queue feeds a Lambda function, AWS asks for a visibility timeout of at least 6 × the function timeout: with a function timeout of ${visibility} s, ${Math.min(6 * visibility, SQS_MAX_VISIBILITY_S)} s.`,
    },
  ]
}

/** The settings for people, one broker a line with its note below. */
export function formatBrokerSettings(list: readonly BrokerSetting[], indent = '    '): string[] {
  const out: string[] = []
  for (const b of list) {
    out.push(`${indent}${b.broker.padEnd(15)} ${Object.entries(b.settings).map(([k, v]) => `${k} ${v}`).join(', ')}`)
    out.push(`${indent}${' '.repeat(16)}${b.note}`)
  }
  return out
}
