/**
 * The `routes:` block that puts the sample payments service behind fencegate, as
 * config/fencegate.yaml does: writes fenced and deduplicated, an unknown outcome settled by the
 * sample's lookup by idempotency key, reads passed through.
 * @param paymentsUrl where the payments service listens
 * @param resource the fencing resource template; default one mark per account
 */
export function paymentsRoutes(paymentsUrl: string, resource = 'account:{param.account}'): string {
  return `routes:
  - name: payments
    match:
      path: /accounts/:account/*
      methods: [POST, PUT, PATCH, DELETE]
    upstream:
      url: ${paymentsUrl}
      timeout: 10s
    fencing:
      resource: "${resource}"
    idempotency:
      required: true
      settle:
        probe:
          path: "/accounts/{param.account}/charges?idempotencyKey={key}"
          applied: [200]
          notApplied: [404]
        after: 2s
        every: 30s
  - name: payments-read
    match:
      path: /accounts/:account/*
      methods: [GET, HEAD]
    upstream:
      url: ${paymentsUrl}
`
}
