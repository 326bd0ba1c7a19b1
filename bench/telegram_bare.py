"""A bare echo bot as a process of its own: the baseline for start-up time and memory.

The library's own framework and nothing else (ptb ``Application`` + ``MessageHandler``;
aiogram ``Dispatcher`` + ``Router``), long polling the Bot API at ``--api-url``; a text
starting with "three" gets three replies (the multi-message turn's baseline). Run by
``bench/telegram_e2e.py``; stops on SIGTERM / SIGINT.

    python bench/telegram_bare.py --library ptb --api-url http://127.0.0.1:PORT
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal

TOKEN_VARIABLE = "TELEGRAM_BOT_TOKEN"


def replies(text: str) -> int:
    return 3 if text.startswith("three") else 1


async def ptb(token: str, root: str, stop: asyncio.Event) -> None:
    from telegram import Update
    from telegram.ext import Application, ContextTypes, MessageHandler, filters

    async def echo(update: Update, context: ContextTypes.DEFAULT_TYPE) -> None:
        assert update.message is not None and update.message.text is not None
        for _ in range(replies(update.message.text)):
            await update.message.reply_text(update.message.text)

    application = (
        Application.builder()
        .token(token)
        .base_url(f"{root}/bot")
        .base_file_url(f"{root}/file/bot")
        .concurrent_updates(True)
        .build()
    )
    application.add_handler(MessageHandler(filters.TEXT, echo))
    async with application:
        await application.start()
        assert application.updater is not None
        await application.updater.start_polling(poll_interval=0.0, timeout=10)
        await stop.wait()
        await application.updater.stop()
        await application.stop()


async def aiogram(token: str, root: str, stop: asyncio.Event) -> None:
    from aiogram import Bot, Dispatcher, Router
    from aiogram.client.session.aiohttp import AiohttpSession
    from aiogram.client.telegram import TelegramAPIServer
    from aiogram.types import Message

    router = Router()

    @router.message()
    async def echo(message: Message) -> None:
        for _ in range(replies(message.text or "")):
            await message.answer(message.text or "?")

    dispatcher = Dispatcher()
    dispatcher.include_router(router)
    bot = Bot(token, session=AiohttpSession(api=TelegramAPIServer.from_base(root)))
    polling = asyncio.create_task(
        dispatcher.start_polling(bot, handle_signals=False, polling_timeout=10)
    )
    await stop.wait()
    await dispatcher.stop_polling()
    await asyncio.wait_for(polling, 10)


async def main(library: str, root: str) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    token = os.environ[TOKEN_VARIABLE]
    await (ptb if library == "ptb" else aiogram)(token, root, stop)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--library", choices=("ptb", "aiogram"), required=True)
    parser.add_argument("--api-url", required=True)
    args = parser.parse_args()
    asyncio.run(main(args.library, args.api_url))
