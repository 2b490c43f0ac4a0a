/**
 * Addresses of the audit view (contract §5a) for what operators already read: access-log lines
 * and problems. A 412 is about its resource (who took over), every other decision about its key.
 */

/** What a view link is made from: an attempt's outcome, key hash and fencing resource. */
export interface Followed {
  outcome?: string
  keyHash?: string
  resource?: string
}

/**
 * The timeline view's address for an attempt: `/ui/timeline?keyHash=H` (or `?resource=R` for a
 * stale write or an attempt without a key), after `publicUrl` when given (admin.publicUrl);
 * undefined when the attempt has neither.
 */
export function timelineLink(a: Followed, publicUrl?: string): string | undefined {
  const q = a.resource !== undefined && (a.outcome === 'stale' || !a.keyHash)
    ? `resource=${encodeURIComponent(a.resource)}`
    : a.keyHash ? `keyHash=${a.keyHash}` : undefined
  return q === undefined ? undefined : `${publicUrl ?? ''}/ui/timeline?${q}`
}
