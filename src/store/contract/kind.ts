/** Store kinds from the config (contract §2); also the `store` label in metrics. */
export type StoreKind = 'memory' | 'sqlite' | 'redis' | 'postgres'
