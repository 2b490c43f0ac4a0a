/**
 * Fencing (contract §3): the reader of a request's token and resource (./read.ts), the token's
 * grammar (./token.ts) and this process's window tracker (./window-tracker.ts). The check-and-set
 * of the high-water mark is one atomic store call, made by the admission step
 * (src/admission.ts); the token is forwarded unchanged so the upstream can check it too.
 */
export { fenceReader, type FenceInput } from './read.js'
export { WindowTracker } from './window-tracker.js'
export { parseFencingToken } from './token.js'
