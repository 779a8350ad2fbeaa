import { Module } from '@nestjs/common';
import { TranslatorController } from './translator.controller.js';

@Module({ controllers: [TranslatorController] })
export class TranslatorModule {}
