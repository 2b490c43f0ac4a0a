// Two gateways 20 s apart (faketime) sharing one Redis: see ./lease-skew.ts.
import { describeLeaseSkew } from './lease-skew.js'

describeLeaseSkew('redis')
