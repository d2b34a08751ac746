import django.db.models.functions.datetime
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('testapp', '0003_execution_ran_at'),
    ]

    operations = [
        migrations.CreateModel(
            name='Ledger',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('job_id', models.BigIntegerField()),
                ('attempt', models.IntegerField()),
                ('fence', models.BigIntegerField()),
                ('worker_id', models.TextField()),
                ('at', models.DateTimeField(db_default=django.db.models.functions.datetime.Now())),
            ],
            options={
                'indexes': [models.Index(fields=['job_id', 'fence'], name='testapp_ledger_job')],
            },
        ),
    ]
