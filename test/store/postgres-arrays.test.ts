// The batch columns' array literals, read back by a real PostgreSQL as the batch functions' parameter types.
import { afterAll, expect, test } from 'vitest'
import pg from 'pg'
import { arrayLiteral } from '../../src/store/postgres/arrays.js'

const pool = new pg.Pool({ connectionString: process.env.PG_URL ?? 'postgres://postgres@127.0.0.1:5432/test', max: 1 })
afterAll(() => pool.end())

const readBack = async (type: string, values: unknown[]) => (await pool.query(`SELECT $1::${type} AS a`, [arrayLiteral(values)])).rows[0].a

test('text elements keep quotes, backslashes, commas, braces, spaces, NULL-looking words and empties', async () => {
  const values = ['plain', 'a"b', 'back\\slash', 'x,y', '{z}', ' lead', 'NULL', '', '[["content-type","application/json"]]', 'ünï', null]
  expect(await readBack('text[]', values)).toEqual(values)
})

test('bigint, boolean and bytea elements, with NULLs', async () => {
  expect(await readBack('bigint[]', ['9007199254740993', 7, null])).toEqual(['9007199254740993', '7', null])
  expect(await readBack('boolean[]', [true, false, null])).toEqual([true, false, null])
  const body = Buffer.from([0, 1, 0x22, 0x5c, 0xff])
  expect(await readBack('bytea[]', [body, null, Buffer.alloc(0), new Uint8Array([7, 8])])).toEqual([body, null, Buffer.alloc(0), Buffer.from([7, 8])])
})
