import { defineConfig } from 'vitest/config'

export default defineConfig({
  test: {
    include: ['test/**/*.test.ts'],
    testTimeout: 20_000,
    hookTimeout: 30_000,
    // gateway tests start real processes and sockets; two cores do not profit from more workers
    maxWorkers: 2,
    minWorkers: 1,
  },
})
