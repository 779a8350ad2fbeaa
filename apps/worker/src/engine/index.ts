export type { Engine, EngineModel, GenerateJob, ModelSpec } from './engine.types.js';
export { LlamaEngine } from './llama-engine.js';
export { SyntheticEngine, SYNTHETIC_TOKEN } from './synthetic-engine.js';
