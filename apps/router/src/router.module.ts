import { hostname } from 'node:os';
import { Logger, Module, type DynamicModule } from '@nestjs/common';
import type { NatsConnection } from '@nats-io/transport-node';
import { BusModule, ModelCatalogue } from '@cortex/bus';
import { CONFIG, type CortexConfig } from '@cortex/config';
import { FleetRegistry } from './fleet/fleet.registry.js';
import { CatalogueService } from './catalogue/catalogue.service.js';
import { FactsService } from './catalogue/facts.service.js';
import { AdminService } from './placement/admin.service.js';
import { LoadCoordinator } from './placement/load-coordinator.js';
import { PlacementService } from './placement/placement.service.js';
import { ReplicaService } from './placement/replica.service.js';
import { AffinityTable } from './placement/affinity.table.js';
import { LoadLease } from './placement/load-lease.js';
import { PinStore } from './placement/pin.store.js';
import { WorkerCommands } from './placement/worker-commands.js';
import { RouterController } from './router.controller.js';
import { ROUTER_ID } from './router.tokens.js';

@Module({})
export class RouterModule {
  static register(config: CortexConfig, nc: NatsConnection): DynamicModule {
    return {
      module: RouterModule,
      imports: [BusModule.forRoot(nc, config.nats.requestTimeoutMs)],
      controllers: [RouterController],
      providers: [
        { provide: CONFIG, useValue: config },
        { provide: ROUTER_ID, useValue: `router-${hostname()}-${process.pid}` },
        FleetRegistry,
        AffinityTable,
        LoadLease,
        PinStore,
        {
          provide: ModelCatalogue,
          useFactory: () =>
            ModelCatalogue.open(nc, config, (error) =>
              new Logger('catalogue').warn(`catalogue watch: ${error.message}; watching again`),
            ),
        },
        CatalogueService,
        WorkerCommands,
        FactsService,
        LoadCoordinator,
        PlacementService,
        ReplicaService,
        AdminService,
      ],
    };
  }
}
