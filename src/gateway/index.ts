export { Gateway, aggregateToolName, TOOL_SEPARATOR } from './gateway.js';
export type { GatewayEvent, GatewayOptions } from './gateway.js';
export { ConfigError, loadConfigFile, parseConfig, expand } from './config.js';
export type { GatewayConfig, GatewayServerConfig, ParseConfigOptions } from './config.js';
export { createGatewayServer, GATEWAY_INFO } from './mcp-server.js';
export { startGatewayHttp } from './http/http.js';
export type { GatewayHttp, GatewayHttpOptions } from './http/http.js';
export { managementTools } from './management-tools.js';
export { serveGatewayStdio, eraOfOpening, type GatewayStdioOptions, type HostEra } from './stdio.js';
