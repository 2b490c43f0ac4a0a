// Replicas 20 s apart (faketime) sharing one PostgreSQL: see ./clock-skew.ts.
import { describeClockSkew } from './clock-skew.js'

describeClockSkew('postgres')
