export * from './codes.js';
export * from './errors.js';
export * from './schemas.js';
export * from './types.js';
export * from './dialect.js';
export * from './extensions.js';
export * from './fs.js';
export * from './binary-frames.js';
