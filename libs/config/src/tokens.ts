/** Nest injection token for the validated `CortexConfig`. */
export const CONFIG = Symbol('cortex.config');
