// Two gateways 20 s apart (faketime) sharing one PostgreSQL: see ./lease-skew.ts.
import { describeLeaseSkew } from './lease-skew.js'

describeLeaseSkew('postgres')
