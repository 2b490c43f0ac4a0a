/**
 * Fencing (contract §3): the reader of a request's token and resource (./read.ts), the token's
 * grammar (./token.ts), and the check-to-apply window: this process's tracker
 * (./window-tracker.ts), the store-wide one (./window.ts) and one request's part in them
 * (./request-window.ts). The check-and-set of the high-water mark is one atomic store call, made
 * by the admission step (src/admission/); the token is forwarded unchanged so the upstream can
 * check it too.
 */
export { fenceReader, type FenceInput } from './read.js'
export { WindowTracker } from './window-tracker.js'
export { RouteWindows, RequestWindow, type FenceAnswer } from './request-window.js'
export { parseFencingToken } from './token.js'
