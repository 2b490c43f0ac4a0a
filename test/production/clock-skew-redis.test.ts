// Replicas 20 s apart (faketime) sharing one Redis: see ./clock-skew.ts.
import { describeClockSkew } from './clock-skew.js'

describeClockSkew('redis')
